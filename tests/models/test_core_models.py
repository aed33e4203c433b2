"""ViT backbone, GMoE family, registry and pretrained loading."""
import pytest
import torch
from safetensors.torch import save_file

import dgmoe
from dgmoe.models.pretrained import CheckpointError, CheckpointMismatchError, load_pretrained
from dgmoe.moe import MoEMlp
from dgmoe.registry import UnknownNameError

TINY = dict(img_size=32, patch_size=4, num_classes=5)

# The parameter names of timm's vit_tiny_patch16_224 (blocks.0 shown; every block repeats them).
TIMM_KEYS = {"cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias", "norm.weight",
             "norm.bias", "head.weight", "head.bias"} | {
    f"blocks.0.{k}" for k in ("norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
                              "attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias",
                              "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias")}


def test_registry_lists_required_names():
    names = dgmoe.list_models()
    for size in ("tiny", "small", "base"):
        assert f"vit_{size}_patch16_224" in names and f"gmoe_{size}_patch16_224" in names


@pytest.mark.parametrize("size,width,heads", [("tiny", 192, 3), ("small", 384, 6), ("base", 768, 12)])
def test_vit_sizes_and_timm_parameter_names(size, width, heads):
    model = dgmoe.create_model(f"vit_{size}_patch16_224", **TINY)
    keys = set(model.state_dict())
    assert TIMM_KEYS <= keys and len(model.blocks) == 12
    assert model.embed_dim == width and model.blocks[0].attn.num_heads == heads
    assert model.blocks[0].mlp.fc1.out_features == 4 * width


@pytest.mark.parametrize("img,patch", [(32, 4), (48, 8), (64, 16), (224, 16)])
def test_any_image_and_patch_size(img, patch):
    model = dgmoe.create_model("gmoe_tiny_patch16_224", img_size=img, patch_size=patch, num_classes=3, depth=12)
    assert model(torch.randn(2, 3, img, img)).shape == (2, 3)
    assert model.pos_embed.shape[1] == (img // patch) ** 2 + 1


def test_gmoe_placements_and_defaults():
    model = dgmoe.create_model("gmoe_tiny_patch16_224", **TINY)
    sparse = [i for i, b in enumerate(model.blocks) if isinstance(b.mlp, MoEMlp)]
    assert sparse == [8, 10]
    cfg = model.blocks[8].mlp.config
    assert (cfg.num_experts, cfg.top_k, cfg.router) == (6, 2, "cosine")
    every = dgmoe.create_model("gmoe_tiny_patch16_224", moe_layers="every-two", **TINY)
    assert [i for i, b in enumerate(every.blocks) if isinstance(b.mlp, MoEMlp)] == [0, 2, 4, 6, 8, 10]
    explicit = dgmoe.create_model("gmoe_tiny_patch16_224", moe_layers=[1, 11], top_k=1, router="linear", **TINY)
    assert [i for i, b in enumerate(explicit.blocks) if isinstance(b.mlp, MoEMlp)] == [1, 11]
    assert explicit.blocks[1].mlp.config.top_k == 1


def test_gmoe_small_parameter_count_matches_paper():
    model = dgmoe.create_model("gmoe_small_patch16_224", num_classes=7)
    assert abs(dgmoe.count_parameters(model) - 33.8e6) / 33.8e6 < 0.02


def _dense_and_gmoe(**moe):
    torch.manual_seed(3)
    dense = dgmoe.create_model("vit_tiny_patch16_224", **TINY)
    gmoe = dgmoe.create_model("gmoe_tiny_patch16_224", **TINY, **moe)
    state = {k: v for k, v in dense.state_dict().items()}
    from dgmoe.models.pretrained import LoadReport, adapt_state_dict

    adapted = adapt_state_dict(gmoe, state, LoadReport("memory"))
    gmoe.load_state_dict({**gmoe.state_dict(), **adapted})
    return dense, gmoe


@pytest.mark.parametrize("router", ["cosine", "linear"])
@pytest.mark.parametrize("train", [False, True])
def test_gmoe_with_copied_experts_equals_dense_vit(router, train):
    dense, gmoe = _dense_and_gmoe(router=router, top_k=2, renormalize=True)
    for layer in (m for m in gmoe.modules() if isinstance(m, MoEMlp)):  # any router state
        for p in layer.router.parameters():
            torch.nn.init.normal_(p, std=1.0)
    dense.train(train), gmoe.train(train)
    x = torch.randn(3, 3, 32, 32)
    torch.testing.assert_close(gmoe(x), dense(x), atol=1e-5, rtol=1e-5)


def test_same_seed_same_output():
    outs = []
    for _ in range(2):
        torch.manual_seed(11)
        model = dgmoe.create_model("gmoe_tiny_patch16_224", **TINY)
        model.train()
        torch.manual_seed(12)
        outs.append(model(torch.randn(2, 3, 32, 32)))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def _timm_checkpoint(tmp_path, fmt="safetensors", num_classes=1000, img_size=32, wrap=False):
    dense = dgmoe.create_model("vit_tiny_patch16_224", img_size=img_size, patch_size=4, num_classes=num_classes)
    state = {k: v.clone() for k, v in dense.state_dict().items()}
    path = tmp_path / f"ckpt.{fmt}"
    if fmt == "safetensors":
        save_file(state, str(path))
    else:
        torch.save({"model": state} if wrap else state, path)
    return dense, path


@pytest.mark.parametrize("fmt,wrap", [("safetensors", False), ("pth", True), ("pth", False)])
def test_timm_checkpoint_loads_strictly_and_round_trips(tmp_path, fmt, wrap):
    dense, path = _timm_checkpoint(tmp_path, fmt, num_classes=5, wrap=wrap)
    model = dgmoe.create_model("vit_tiny_patch16_224", pretrained=str(path), **TINY)
    for k, v in dense.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    assert not model.info.load_report.reinitialized and not model.info.load_report.expanded


def test_gmoe_from_dense_checkpoint_copies_experts_and_reports(tmp_path):
    dense, path = _timm_checkpoint(tmp_path, num_classes=1000)
    model = dgmoe.create_model("gmoe_tiny_patch16_224", pretrained=str(path), **TINY)
    report = model.info.load_report
    assert report.expanded == ["blocks.8.mlp", "blocks.10.mlp"]
    assert report.initialised == ["blocks.8.mlp.router", "blocks.10.mlp.router"]
    assert report.reinitialized == ["head.weight", "head.bias"] and model.head.out_features == 5
    for e in range(6):
        assert torch.equal(model.blocks[8].mlp.experts.fc1_weight[e], dense.blocks[8].mlp.fc1.weight)


def test_position_embedding_is_resized_for_another_image_size(tmp_path):
    _, path = _timm_checkpoint(tmp_path, img_size=16, num_classes=5)
    model = dgmoe.create_model("vit_tiny_patch16_224", pretrained=str(path), **TINY)
    assert model.info.load_report.resized == ["pos_embed"] and model.pos_embed.shape[1] == 65


def test_unknown_model_lists_close_names():
    with pytest.raises(UnknownNameError, match="gmoe_small_patch16_224"):
        dgmoe.create_model("gmoe_smal_patch16_224")


def test_missing_and_corrupt_checkpoints_name_the_file(tmp_path):
    with pytest.raises(CheckpointError, match="nope.pth"):
        dgmoe.create_model("vit_tiny_patch16_224", pretrained=str(tmp_path / "nope.pth"), **TINY)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="bad.safetensors"):
        dgmoe.create_model("vit_tiny_patch16_224", pretrained=str(bad), **TINY)


def test_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"model": {"x": torch.zeros(1)}, "obj": object()}, path)
    with pytest.raises(CheckpointError, match="evil.pth"):
        dgmoe.create_model("vit_tiny_patch16_224", pretrained=str(path), **TINY)


def test_incompatible_checkpoint_names_first_mismatched_key(tmp_path):
    small = dgmoe.create_model("vit_small_patch16_224", **TINY)
    path = tmp_path / "small.safetensors"
    save_file({k: v.contiguous() for k, v in small.state_dict().items()}, str(path))
    with pytest.raises(CheckpointMismatchError, match="shape mismatch at 'cls_token'"):
        load_pretrained(dgmoe.create_model("vit_tiny_patch16_224", **TINY), path)
    state = dict(dgmoe.create_model("vit_tiny_patch16_224", **TINY).state_dict())
    state["extra.weight"] = torch.zeros(1)
    save_file(state, str(tmp_path / "extra.safetensors"))
    with pytest.raises(CheckpointMismatchError, match="unexpected key 'extra.weight'"):
        load_pretrained(dgmoe.create_model("vit_tiny_patch16_224", **TINY), tmp_path / "extra.safetensors")
    state.pop("extra.weight"), state.pop("norm.bias")
    save_file(state, str(tmp_path / "missing.safetensors"))
    with pytest.raises(CheckpointMismatchError, match="missing key 'norm.bias'"):
        load_pretrained(dgmoe.create_model("vit_tiny_patch16_224", **TINY), tmp_path / "missing.safetensors")


def test_forward_equals_timm_with_same_weights():
    timm = pytest.importorskip("timm", reason="timm does not import here (it needs a working torchvision)")
    ref = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=7).eval()
    ours = dgmoe.create_model("vit_small_patch16_224", num_classes=7).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(2, 3, 224, 224)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


def test_hf_hub_source_without_the_extra_or_network_is_a_clear_error(monkeypatch):
    from dgmoe.models.pretrained import resolve_checkpoint

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no test reaches the network: with the hub extra, offline mode
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # (and a loopback endpoint nothing listens on)
    try:
        import huggingface_hub.constants as hub_constants

        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(hub_constants, "ENDPOINT", "http://127.0.0.1:9")
    except ImportError:
        pass

    with pytest.raises(CheckpointError, match="hf-hub:timm/deit_small_patch16_224"):
        resolve_checkpoint("hf-hub:timm/deit_small_patch16_224.fb_in1k")
