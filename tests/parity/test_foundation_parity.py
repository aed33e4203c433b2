"""dgmoe's CLIP and DINOv2 towers against numbers recorded from the peers' own code (open_clip, transformers'
CLIPVisionModel, timm, DINOv2): each case's file is the peer's random-weight state dict in the peer's own
format, loaded with `pretrained=` (the format detected from its keys), and dgmoe's forward must equal the
peer's output within 1e-5. Regenerate with the command in fixtures/foundation.json (record_foundation.py);
no peer is needed here."""
import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import dgmoe
from dgmoe.models.info import describe_model
from dgmoe.models.pretrained import CheckpointMismatchError
from dgmoe.moe.auxiliary import sparse_layers

FIXTURES = Path(__file__).resolve().parent / "fixtures"
META = json.loads((FIXTURES / "foundation.json").read_text())
CASES = {case["case"]: case for case in META["cases"]}
#: the format each peer's file must be read as (`LoadReport.format`)
FORMATS = {"openai_clip_quickgelu": "openai_clip", "openclip_gelu": "openai_clip",
           "hf_clip_with_projection": "hf_clip", "hf_clip_vision": "hf_clip", "timm_clip_quickgelu": "timm_clip",
           "dinov2_hub_56px": "dinov2_hub", "dinov2_hub_84px": "dinov2_hub", "dinov2_hub_reg4_56px": "dinov2_hub",
           "dinov2_hub_reg4_84px": "dinov2_hub", "timm_dinov2": "timm", "timm_dinov2_reg4": "timm"}


@pytest.fixture(scope="module")
def io():
    return load_file(str(FIXTURES / "foundation_io.safetensors"))


def _load(case: dict, caplog=None) -> torch.nn.Module:
    return dgmoe.create_model(case["model"], pretrained=str(FIXTURES / case["file"]), **case["overrides"]).eval()


def test_fixtures_name_their_peer_version_command_and_every_tensor(io):
    assert "record_foundation.py" in META["command"] and set(META["tensors"]) == set(io)
    assert set(CASES) == set(FORMATS)
    for case in CASES.values():
        assert case["peer"] in ("open_clip", "transformers", "timm", "dinov2") and case["peer_version"]
        assert (FIXTURES / case["file"]).is_file()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_forward_equals_the_peers_own_code(name, io):
    case = CASES[name]
    model = _load(case)
    assert model.load_report.format == FORMATS[name]
    with torch.no_grad():
        out = model(io[f"{name}.x"])
    torch.testing.assert_close(out, io[f"{name}.out"], rtol=1e-5, atol=1e-5)


def test_the_report_says_what_was_dropped_and_converted(caplog):
    with caplog.at_level(logging.INFO, logger="dgmoe.models.pretrained"):
        report = _load(CASES["openai_clip_quickgelu"]).load_report
    assert any(d.startswith("transformer (") for d in report.dropped)  # the text tower
    assert {"token_embedding", "logit_scale", "text_projection"} <= set(report.dropped)
    assert any("proj.weight" in c for c in report.converted)
    assert "read as openai_clip" in caplog.text
    hf = _load(CASES["hf_clip_with_projection"]).load_report
    assert any("fused q/k/v" in c for c in hf.converted)
    hub = _load(CASES["dinov2_hub_reg4_84px"]).load_report
    assert "mask_token" in hub.dropped and hub.resized == ["pos_embed"]
    assert any("register_tokens" in c for c in hub.converted)


@pytest.mark.parametrize("name, model, overrides, missing", [
    ("dinov2_hub_56px", "vit_base_patch16_clip_224", dict(img_size=56, patch_size=14, proj_dim=48), "norm_pre.weight"),
    ("openai_clip_quickgelu", "vit_small_patch14_dinov2", dict(img_size=32, patch_size=8), "patch_embed.proj.bias"),
    ("hf_clip_vision", "vit_base_patch16_clip_quickgelu_224", dict(proj_dim=48), "proj.weight"),
])
def test_a_checkpoint_of_another_family_fails_in_one_line_naming_what_is_missing(name, model, overrides, missing):
    case = CASES[name]
    kwargs = {**case["overrides"], **overrides}
    with pytest.raises(CheckpointMismatchError) as err:
        dgmoe.create_model(model, pretrained=str(FIXTURES / case["file"]), **kwargs)
    text = str(err.value)
    assert "\n" not in text and repr(missing) in text and "read as" in text, text


def test_dinov2_at_224_px_resamples_the_518_px_grid():
    model = dgmoe.create_model("vit_small_patch14_dinov2", depth=1, num_classes=0)
    assert model.patch_embed.grid_size == (16, 16) and model.pos_embed.shape[1] == 1 + 16 * 16
    reg = dgmoe.create_model("vit_small_patch14_reg4_dinov2", depth=1, num_classes=0)
    assert reg.num_prefix_tokens == 5 and reg.pos_embed.shape[1] == 16 * 16


def _sparse_variants(dense: str) -> list[str]:
    return [n for n in dgmoe.list_models() if describe_model(n).dense_twin == dense]


#: (peer case, sparse variant) for every sparse model whose dense twin a recorded case loads into
SPARSE_CASES = [(name, sparse) for name in sorted(FORMATS) for sparse in _sparse_variants(CASES[name]["model"])]


def test_every_foundation_backbone_has_gmoe_and_its_variants_are_covered():
    towers = {case["model"] for case in CASES.values()}
    assert {sparse.split("_")[0] for _, sparse in SPARSE_CASES} == {"gmoe", "sfmoe"}
    for tower in towers:
        assert any(s.startswith("gmoe_") for s in _sparse_variants(tower)), tower


@pytest.mark.parametrize("name, sparse", SPARSE_CASES)
def test_sparse_variant_from_the_peers_file_computes_the_peers_dense_output(name, sparse, io):
    """GMoE App. C.2 per backbone and checkpoint format: experts copied from the tower's own FFN, with its own
    activation (QuickGELU for OpenAI's CLIP), top-k gates renormalised: the sparse model is the dense one."""
    case = CASES[name]
    model = dgmoe.create_model(sparse, pretrained=str(FIXTURES / case["file"]), moe_layers=[0, 1],
                               **case["overrides"]).eval()
    assert model.load_report.expanded == ["blocks.0.mlp", "blocks.1.mlp"]
    activation = describe_model(case["model"]).activation
    assert all(layer.experts.activation == activation for layer in sparse_layers(model).values())
    with torch.no_grad():
        out = model(io[f"{name}.x"])
    torch.testing.assert_close(out, io[f"{name}.out"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.train()(io[f"{name}.x"]), io[f"{name}.out"], rtol=1e-5, atol=1e-5)  # noisy gates
    model.eval()
    if activation != "gelu":  # the check can fail: GELU experts on a QuickGELU tower are another function
        for layer in sparse_layers(model).values():
            layer.experts.act = torch.nn.functional.gelu
        with torch.no_grad():
            assert (model(io[f"{name}.x"]) - io[f"{name}.out"]).abs().max() > 1e-3


def test_towers_declare_their_facts_in_their_model_info():
    from dgmoe.data.transforms import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN

    clip = describe_model("gmoe_base_patch16_clip_quickgelu_224")
    assert (clip.mean, clip.std, clip.activation, clip.patch_size, clip.num_prefix_tokens) == \
        (CLIP_MEAN, CLIP_STD, "quick_gelu", 16, 1)
    assert clip.num_features == 512 and clip.tower == ("CLIP ViT-B/16 (OpenAI, QuickGELU)", "Radford et al., ICML 2021")
    assert describe_model("vit_large_patch14_clip_224").activation == "gelu"
    dino = describe_model("vit_base_patch14_reg4_dinov2")
    assert (dino.mean, dino.input_size, dino.patch_size, dino.num_prefix_tokens) == \
        (IMAGENET_MEAN, (3, 224, 224), 14, 5)
