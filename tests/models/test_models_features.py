"""`create_model(..., features_only=True)` as timm's feature extractors: levels, channels, strides, module names,
default `out_indices` and parameter names. The numbers timm 1.0.31 reports for ResNet-50 and ViT-S/16 are written
out here (no timm needed); `test_equals_timm` checks them, and the outputs, against timm itself where it imports."""
import pytest
import torch

import dgmoe
from dgmoe.models import MODELS
from dgmoe.models.features import features_model
from dgmoe.models.info import describe_model

#: timm 1.0.31, `timm.create_model(name, features_only=True).feature_info.get_dicts()` (out_indices default)
TIMM_RESNET50 = [dict(num_chs=64, reduction=2, module="act1", index=0),
                 dict(num_chs=256, reduction=4, module="layer1", index=1),
                 dict(num_chs=512, reduction=8, module="layer2", index=2),
                 dict(num_chs=1024, reduction=16, module="layer3", index=3),
                 dict(num_chs=2048, reduction=32, module="layer4", index=4)]
TIMM_VIT_S16 = [dict(module=f"blocks.{i}", num_chs=384, reduction=16, index=i) for i in (9, 10, 11)]
TIMM_PARAMS = {"resnet50": 23_508_032, "vit_small_patch16_224": 21_664_896}  # features_only models


def test_resnet50_levels_channels_and_strides_are_timms():
    features = dgmoe.create_model("resnet50", features_only=True).eval()
    assert features.feature_info.get_dicts() == TIMM_RESNET50
    assert features.feature_info.channels() == [64, 256, 512, 1024, 2048]
    assert features.feature_info.reduction() == [2, 4, 8, 16, 32]
    assert features.feature_info.module_name() == ["act1", "layer1", "layer2", "layer3", "layer4"]
    with torch.no_grad():
        maps = features(torch.randn(2, 3, 64, 64))
    assert [tuple(m.shape) for m in maps] == [(2, c, 64 // r, 64 // r) for c, r in
                                              zip(features.feature_info.channels(), features.feature_info.reduction())]
    assert sum(p.numel() for p in features.parameters()) == TIMM_PARAMS["resnet50"]
    full = dgmoe.create_model("resnet50")
    assert set(features.state_dict()) == {k for k in full.state_dict() if not k.startswith("fc.")}


def test_vit_s16_gives_the_last_three_blocks_at_the_patch_grid():
    features = dgmoe.create_model("vit_small_patch16_224", features_only=True).eval()
    assert features.feature_info.get_dicts() == TIMM_VIT_S16 and features.out_indices == [9, 10, 11]
    with torch.no_grad():
        maps = features(torch.randn(1, 3, 224, 224))
    assert [tuple(m.shape) for m in maps] == [(1, 384, 14, 14)] * 3
    assert sum(p.numel() for p in features.parameters()) == TIMM_PARAMS["vit_small_patch16_224"]
    full = dgmoe.create_model("vit_small_patch16_224")
    kept = {f"model.{k}" for k in full.state_dict() if not k.startswith(("head.", "norm."))}
    assert set(features.state_dict()) == kept


def test_features_are_the_block_outputs_without_the_class_token_and_final_norm():
    model = dgmoe.create_model("vit_micro_patch7_28").eval()
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        tokens = model.blocks(model.embed(x))
        normed = model.norm(tokens)
        final, levels = model.forward_intermediates(x, indices=(-1,))
        features = features_model(model, out_indices=(-1,))(x)  # prunes the model in place, as timm
    expected = tokens[:, 1:].reshape(2, 4, 4, 96).permute(0, 3, 1, 2)
    torch.testing.assert_close(levels[0], expected)
    torch.testing.assert_close(features[0], expected)
    torch.testing.assert_close(final, normed)
    assert len(model.blocks) == 6 and isinstance(model.head, torch.nn.Identity)  # pruned: nothing after block 5


def test_out_indices_select_levels_as_timm():
    def picked(name, out_indices):
        return dgmoe.create_model(name, features_only=True, out_indices=out_indices).feature_info.module_name()

    assert picked("resnet50", (1, 4)) == ["layer1", "layer4"]
    assert picked("resnet50", 2) == ["layer3", "layer4"]  # an int n: the last n levels
    assert picked("resnet50", (-1,)) == ["layer4"]
    assert picked("vit_micro_patch7_28", (4, 1, 4)) == ["blocks.1", "blocks.4"]  # sorted, once each
    shallow = dgmoe.create_model("resnet50", features_only=True, out_indices=(0, 1))
    assert list(shallow) == ["conv1", "bn1", "act1", "maxpool", "layer1"]  # nothing after the last level


def test_resnet_features_keep_freeze_bn():
    features = dgmoe.create_model("resnet50", features_only=True, freeze_bn=True).train()
    assert not features["bn1"].training and features["layer1"].training


def _toy(name: str) -> dict:
    info = describe_model(name)
    if info.family == "resnet":
        return {"img_size": 32}
    kwargs = {"img_size": 32, "embed_dim": 32, "num_heads": 2}
    return kwargs if "r26" in name else {**kwargs, "patch_size": 8}


@pytest.mark.parametrize("name", MODELS.names())
def test_every_registered_model_has_feature_levels(name):
    """Every registered model (all are ResNets or ViTs) gives maps whose shapes its `feature_info` states."""
    features = dgmoe.create_model(name, features_only=True, **_toy(name)).eval()
    info = describe_model(name)
    x = torch.randn(2, *info.input_size[:1], 32, 32)
    meta = {"lat": torch.tensor([10.0, -45.0]), "lon": torch.tensor([100.0, -3.0])}
    with torch.no_grad():
        maps = features(x, meta=meta) if name.startswith("moge") else features(x)
    fi = features.feature_info
    assert len(maps) == len(fi.out_indices) == (5 if info.family == "resnet" else 3)
    for m, c, r in zip(maps, fi.channels(), fi.reduction()):
        assert m.shape == (2, c, -(-32 // r), -(-32 // r)) and torch.isfinite(m).all()


def test_moge_features_follow_the_metadata_routing():
    features = dgmoe.create_model("moge_tiny_patch16_224", features_only=True, **_toy("moge_tiny_patch16_224")).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        a = features(x, meta={"lat": torch.tensor([10.0, 10.0]), "lon": torch.tensor([100.0, 100.0])})
        b = features(x, meta={"lat": torch.tensor([-60.0, -60.0]), "lon": torch.tensor([-3.0, -3.0])})
    assert not torch.allclose(a[-1], b[-1])


@pytest.mark.parametrize("name", ["resnet50", "vit_small_patch16_224"])
def test_equals_timm(name):
    timm = pytest.importorskip("timm", reason="timm does not import here (CPU torch wheel without torchvision); "
                                              "run this file with /work/parity-venv/bin/python to compare")
    torch.manual_seed(0)
    for out_indices in (None, (1, 4), 2):
        kwargs = {} if out_indices is None else {"out_indices": out_indices}
        ref = timm.create_model(name, features_only=True, **kwargs).eval()
        ours = dgmoe.create_model(name, features_only=True, **kwargs).eval()
        assert ours.feature_info.get_dicts() == ref.feature_info.get_dicts()
        ours.load_state_dict(ref.state_dict(), strict=True)  # the same parameter names, nothing more or less
        x = torch.randn(2, 3, 224, 224)
        with torch.no_grad():
            for a, b in zip(ours(x), ref(x), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert sum(p.numel() for p in ours.parameters()) == TIMM_PARAMS[name]
