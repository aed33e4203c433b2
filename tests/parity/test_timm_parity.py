"""dgmoe against numbers recorded from timm's own code (tests/parity/fixtures/timm_*; regenerate with the
command in each fixture's JSON, see record_timm.py). No timm is needed here: inputs and timm's outputs
are read from the fixtures, and every case compares dgmoe's output with timm's."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import dgmoe
from dgmoe.models.hybrid import ResNetV2Backbone
from dgmoe.models.resample import resample_patch_embed, resize_pos_embed

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOPICS = ("resample", "vit", "r26")


def _meta(topic: str) -> dict:
    return json.loads((FIXTURES / f"timm_{topic}.json").read_text())


def _tensors(topic: str) -> dict[str, torch.Tensor]:
    return load_file(str(FIXTURES / f"timm_{topic}.safetensors"))


def _max_relative(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


RESAMPLE, VIT = _meta("resample"), _meta("vit")
MODES = {"antialias": True, "plain": False}
#: A resampled position embedding against timm's: each output is a bicubic (or antialiased, wider) weighted sum
#: of a few inputs in two passes, its weights computed in float32 by whichever kernels the CPU runs (scalar, AVX2
#: or AVX-512: ATen computes the cubic coefficients and the sums in its own order on each). Each pass rounds its
#: coefficients and its 4-8 products and sums, within ~16 units of float32 rounding (u = 2^-24) of
#: sum|w| x max|input| (sum|w| <= 1.3 for the cubic kernel); two passes and two runs (timm's on the recording
#: machine, dgmoe's here): 64 u of max|input| x 1.3 (1.2e-5 for these embeddings of up to 3.9). Measured: 0 on the
#: recording machine's AVX-512 kernels, 2.4e-6 on scalar ones. A real change (antialias or not, another
#: align_corners, another grid) moves entries by more than 1e-3 (test_the_default_resize_is_timm_09s_antialiased_one).
RESAMPLE_ROUNDING = 64 * 1.3 * 2.0 ** -24


def resample_budget(source: torch.Tensor) -> float:
    """The absolute budget of a resampled embedding from `source` against timm's (RESAMPLE_ROUNDING)."""
    return RESAMPLE_ROUNDING * float(source.abs().max())


@pytest.mark.parametrize("topic", TOPICS)
def test_fixtures_name_their_peer_version_command_and_every_tensor(topic):
    meta = _meta(topic)
    assert meta["peer"] == "timm" and meta["peer_version"] and "record_timm.py" in meta["command"]
    assert set(meta["tensors"]) == set(_tensors(topic))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", RESAMPLE["pos_cases"], ids=lambda c: c["name"])
def test_position_embedding_resize_equals_timm(case, mode):
    t = _tensors("resample")
    old = tuple(case["old_grid"]) if case["old_grid"] else None
    out = resize_pos_embed(t[case["input"]], tuple(case["new_grid"]), case["num_prefix_tokens"],
                           antialias=MODES[mode], old_grid=old)
    torch.testing.assert_close(out, t[f"pos.{case['name']}.{mode}"], rtol=0, atol=resample_budget(t[case["input"]]))


def test_the_default_resize_is_timm_09s_antialiased_one():
    t = _tensors("resample")
    out = resize_pos_embed(t["pos14"], (4, 4))
    torch.testing.assert_close(out, t["pos.14to4.antialias"], rtol=0, atol=resample_budget(t["pos14"]))
    assert (out - t["pos.14to4.plain"]).abs().max() > 1e-3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", RESAMPLE["patch_cases"], ids=lambda c: c["name"])
def test_patch_kernel_resample_equals_timm(case, mode):
    t = _tensors("resample")
    out = resample_patch_embed(t[case["input"]], tuple(case["new_size"]), antialias=MODES[mode])
    ref = t[f"patch.{case['name']}.{mode}"]
    assert out.shape == ref.shape and _max_relative(out, ref) < 1e-5


def _vit(**overrides):
    model = VIT["model"]
    return dgmoe.create_model("vit_tiny_patch16_224", **{**model, **overrides})


def test_vit_forward_equals_timm():
    t = _tensors("vit")
    model = _vit().eval()
    model.load_state_dict({k[len("state."):]: v for k, v in t.items() if k.startswith("state.")}, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(t["x"]), t["tokens"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(t["x"]), t["logits"], rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def vit_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("timm") / "vit_patch16.safetensors"
    save_file({k[len("state."):]: v for k, v in _tensors("vit").items() if k.startswith("state.")}, str(path))
    return path


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", VIT["load_cases"], ids=lambda c: c["name"])
def test_loading_a_patch16_checkpoint_into_another_patch_and_grid_equals_timm(vit_checkpoint, case, mode):
    t = _tensors("vit")
    model = _vit(patch_size=case["patch_size"], img_size=tuple(case["img_size"]), pretrained=str(vit_checkpoint),
                 pretrained_antialias=MODES[mode])
    kernel = t[f"load.patch{case['patch_size']}.{mode}.patch_embed.proj.weight"]
    assert _max_relative(model.patch_embed.proj.weight.detach(), kernel) < 1e-5
    torch.testing.assert_close(model.pos_embed.detach(), t[f"load.{case['name']}.{mode}.pos_embed"], rtol=0,
                               atol=resample_budget(t["state.pos_embed"]))
    assert "patch_embed.proj.weight" in model.info.load_report.resized


def test_r26_stem_equals_timm():
    meta, t = _meta("r26"), _tensors("r26")
    stem = ResNetV2Backbone(tuple(meta["model"]["layers"]), tuple(meta["model"]["channels"])).eval()
    stem.load_state_dict({k[len("state."):]: v for k, v in t.items() if k.startswith("state.")}, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(stem(t["x"]), t["features"], rtol=1e-4, atol=1e-4)
