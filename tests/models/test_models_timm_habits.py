"""timm users' habits with `dgmoe.create_model`: what works as in timm (`checkpoint_path=`, `features_only=`) and
what dgmoe does not do (download weights), each refused in one line that names the argument and says what to
do instead."""
import sys
import types

import pytest
import torch
from safetensors.torch import save_file

import dgmoe
from dgmoe.errors import UsageError
from dgmoe.models.features import features_model
from dgmoe.models.pretrained import OFFLINE_HELP, CheckpointError, CheckpointMismatchError

MICRO = "vit_micro_patch7_28"


def one_line(excinfo: pytest.ExceptionInfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


def _save(model: torch.nn.Module, path, wrap=None) -> None:
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if path.suffix == ".safetensors":
        save_file(state, str(path))
    else:
        torch.save(wrap(state) if wrap else state, path)


# ----- pretrained=True and hub names: dgmoe downloads nothing ------------------------------------------------
def test_pretrained_true_is_timms_download_and_says_how_to_get_weights():
    with pytest.raises(CheckpointError) as info:
        dgmoe.create_model(MICRO, pretrained=True)
    assert "pretrained=True is timm's way to download weights" in one_line(info) and OFFLINE_HELP in str(info.value)


def test_a_hub_name_without_the_hub_extra_says_dgmoe_loads_local_files(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    with pytest.raises(CheckpointError) as info:
        dgmoe.create_model(MICRO, pretrained="hf-hub:timm/vit_small_patch16_224.augreg_in21k")
    message = one_line(info)
    assert "hf-hub:timm/vit_small_patch16_224.augreg_in21k is a Hugging Face Hub name" in message
    assert "local files only and downloads nothing" in message and "'hub' extra" in message


def test_a_failed_hub_fetch_is_one_line_with_the_offline_recipe(monkeypatch):
    def offline(repo, filename):
        raise OSError("cannot reach the Hub\nplease check your connection\nand try again")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=offline))
    with pytest.raises(CheckpointError) as info:
        dgmoe.create_model(MICRO, pretrained="hf-hub:timm/deit_small_patch16_224.fb_in1k")
    message = one_line(info)
    assert "cannot fetch hf-hub:timm/deit_small_patch16_224.fb_in1k (OSError: cannot reach the Hub)" in message
    assert OFFLINE_HELP in message


@pytest.mark.parametrize("name", ["hf-hub:timm/vit_small_patch16_224.augreg_in21k", "timm/vit_small_patch16_224"])
def test_a_hub_model_name_points_at_the_registered_architecture(name):
    with pytest.raises(UsageError) as info:
        dgmoe.create_model(name)
    message = one_line(info)
    assert "is a Hugging Face Hub name" in message
    assert "create_model('vit_small_patch16_224', pretrained=PATH)" in message


def test_a_pretrained_tag_in_the_model_name_is_explained():
    with pytest.raises(UsageError) as info:
        dgmoe.create_model("resnet50.a1_in1k")
    message = one_line(info)
    assert "'.a1_in1k' is a timm pretrained tag" in message and "create_model('resnet50', pretrained=PATH)" in message


# ----- checkpoint_path: the model's own weights, as-is -------------------------------------------------------
@pytest.mark.parametrize("suffix,wrap", [(".safetensors", None), (".pth", None),
                                         (".pth", lambda s: {"state_dict": s, "epoch": 3})])
def test_checkpoint_path_loads_a_fine_tuned_checkpoint_exactly(tmp_path, suffix, wrap):
    tuned = dgmoe.create_model("gmoe_micro_patch7_28", num_classes=5)
    path = tmp_path / f"tuned{suffix}"
    _save(tuned, path, wrap)
    model = dgmoe.create_model("gmoe_micro_patch7_28", num_classes=5, checkpoint_path=str(path))
    for key, value in tuned.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    assert model.info.load_report.summary() == f"loaded {path}"  # nothing adapted


def test_checkpoint_path_prefers_ema_weights_and_strips_wrapper_prefixes_as_timm(tmp_path):
    plain, ema = dgmoe.create_model(MICRO, num_classes=3), dgmoe.create_model(MICRO, num_classes=3)
    path = tmp_path / "train.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in plain.state_dict().items()},
                "state_dict_ema": {f"_orig_mod.{k}": v for k, v in ema.state_dict().items()}}, path)
    model = dgmoe.create_model(MICRO, num_classes=3, checkpoint_path=path)
    assert torch.equal(model.head.weight, ema.head.weight)


def test_checkpoint_path_loads_the_full_model_before_features_only(tmp_path):
    tuned = dgmoe.create_model("resnet50", num_classes=4)
    path = tmp_path / "resnet.safetensors"
    _save(tuned, path)
    features = dgmoe.create_model("resnet50", num_classes=4, checkpoint_path=path, features_only=True)
    assert torch.equal(features["layer4"][2].conv3.weight, tuned.layer4[2].conv3.weight)


def test_checkpoint_path_errors_are_pretrained_errors_naming_the_argument(tmp_path):
    with pytest.raises(CheckpointError) as info:
        dgmoe.create_model(MICRO, checkpoint_path=tmp_path / "nope.pth")
    assert one_line(info).startswith("checkpoint_path: checkpoint file not found:") and "nope.pth" in str(info.value)
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00 not a safetensors file")
    with pytest.raises(CheckpointError) as info:
        dgmoe.create_model(MICRO, checkpoint_path=corrupt)
    assert one_line(info).startswith(f"checkpoint_path: cannot read checkpoint {corrupt}")


def test_checkpoint_path_adapts_nothing_unlike_pretrained(tmp_path):
    """Another head, or a dense checkpoint for a MoE model, is what `pretrained=` adapts; `checkpoint_path=`
    refuses it at the first key that differs."""
    path = tmp_path / "dense.safetensors"
    _save(dgmoe.create_model(MICRO, num_classes=10), path)
    with pytest.raises(CheckpointMismatchError) as info:
        dgmoe.create_model(MICRO, num_classes=5, checkpoint_path=path)
    assert one_line(info) == (f"checkpoint_path: {path}: shape mismatch at 'head.weight': checkpoint (10, 96) vs "
                              "model (5, 96)")
    with pytest.raises(CheckpointMismatchError) as info:
        dgmoe.create_model("gmoe_micro_patch7_28", num_classes=10, checkpoint_path=path)
    assert "unexpected key 'blocks.2.mlp.fc1." in one_line(info)  # the dense FFN a MoE block does not have
    gmoe = dgmoe.create_model("gmoe_micro_patch7_28", num_classes=5, pretrained=str(path))  # what pretrained= does
    assert gmoe.info.load_report.expanded == ["blocks.2.mlp", "blocks.4.mlp"]


@pytest.mark.parametrize("kwargs,expected", [
    (dict(pretrained="a.pth", checkpoint_path="b.pth"), "pass pretrained= or checkpoint_path=, not both"),
    (dict(checkpoint_path="hf-hub:timm/vit_small_patch16_224"), "checkpoint_path must be a local file"),
    (dict(checkpoint_path=True), "checkpoint_path must be a path to a local weights file, got True"),
])
def test_checkpoint_path_misuse(kwargs, expected):
    with pytest.raises(UsageError) as info:
        dgmoe.create_model(MICRO, **kwargs)
    assert expected in one_line(info)


# ----- features_only / out_indices ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,expected", [
    (dict(out_indices=(1, 2)), "out_indices=(1, 2) needs features_only=True (it picks the feature levels a "
                               "feature extractor returns)"),
    (dict(features_only=True, out_indices=(0, 6)), "out_indices=(0, 6): 6 is out of range for 6 feature levels; "
                                                   "use 0..5 (or -6..-1 from the end)"),
    (dict(features_only=True, out_indices=7), "out_indices=7 asks for the last 7 of 6 feature levels; use 1..6"),
    (dict(features_only=True, out_indices="last"), "out_indices must be an int n (the last n feature levels) or "
                                                   "a sequence of level indices, got 'last'"),
    (dict(features_only=True, out_indices=()), "out_indices must hold level indices (ints), got ()"),
])
def test_out_indices_errors(kwargs, expected):
    with pytest.raises(UsageError) as info:
        dgmoe.create_model(MICRO, **kwargs)
    assert one_line(info) == expected


def test_resnet_out_indices_name_its_five_levels():
    with pytest.raises(UsageError) as info:
        dgmoe.create_model("resnet50", features_only=True, out_indices=(5,))
    assert "5 is out of range for 5 feature levels; use 0..4" in one_line(info)


def test_a_family_without_feature_levels_names_the_alternatives():
    with pytest.raises(UsageError) as info:
        features_model(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)), name="my_convnet")
    message = one_line(info)
    assert "features_only=True supports the ResNet and ViT families" in message and "not my_convnet" in message
    assert "forward_features(x)" in message and "num_classes=0" in message
