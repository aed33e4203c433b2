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
from dgmoe.models.pretrained import CheckpointError, CheckpointMismatchError
from dgmoe.models.resample import resize_pos_embed
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
    assert model.info.load_report.format == FORMATS[name]
    with torch.no_grad():
        out = model(io[f"{name}.x"])
    torch.testing.assert_close(out, io[f"{name}.out"], rtol=1e-5, atol=1e-5)


def test_the_report_says_what_was_dropped_and_converted(caplog):
    with caplog.at_level(logging.INFO, logger="dgmoe.models.pretrained"):
        report = _load(CASES["openai_clip_quickgelu"]).info.load_report
    assert any(d.startswith("transformer (") for d in report.dropped)  # the text tower
    assert {"token_embedding", "logit_scale", "text_projection"} <= set(report.dropped)
    assert any("proj.weight" in c for c in report.converted)
    assert "read as openai_clip" in caplog.text
    hf = _load(CASES["hf_clip_with_projection"]).info.load_report
    assert any("fused q/k/v" in c for c in hf.converted)
    hub = _load(CASES["dinov2_hub_reg4_84px"]).info.load_report
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


@pytest.mark.parametrize("registers", [0, 4])
def test_dinov2_at_224_px_resamples_the_hub_files_518_px_grid(registers, tmp_path):
    """A hub-format file at DINOv2's 518 px (37 x 37 patches of 14 px, class token in pos_embed) loads into the
    224 px model (16 x 16): the grid resampled as DINOv2's own forward interpolates it (without registers by
    the factor (16 + 0.1) / 37 and no antialias, which the 16 x 16 output size alone would not give; with
    registers to the size, antialiased); with registers, the class token takes pos_embed[:, 0] (timm's
    `_convert_dinov2`)."""
    name = f"vit_small_patch14{'_reg4' * bool(registers)}_dinov2"
    tiny = dict(embed_dim=32, num_heads=2, depth=1, num_classes=0)
    hub = dict(dgmoe.create_model("vit_small_patch14_dinov2", img_size=518, **tiny).state_dict())
    assert hub["pos_embed"].shape == (1, 1 + 37 * 37, 32)
    hub["mask_token"] = torch.zeros(1, 32)
    if registers:
        hub["register_tokens"] = torch.randn(1, registers, 32)
    torch.save(hub, tmp_path / "dinov2_hub.pth")
    model = dgmoe.create_model(name, pretrained=str(tmp_path / "dinov2_hub.pth"), **tiny)
    assert model.patch_embed.grid_size == (16, 16) and model.num_prefix_tokens == 1 + registers
    report = model.info.load_report
    assert report.format == "dinov2_hub" and report.resized == ["pos_embed"] and report.dropped == ["mask_token"]
    prefix = 0 if registers else 1
    source = hub["pos_embed"][:, 1 - prefix:]
    own = resize_pos_embed(source, (16, 16), prefix, antialias=bool(registers), offset=0.0 if registers else 0.1)
    torch.testing.assert_close(model.pos_embed.detach(), own, rtol=0, atol=0)
    if not registers:  # the offset matters: timm's resampling of the same grid differs
        assert not torch.allclose(model.pos_embed.detach(), resize_pos_embed(source, (16, 16), prefix, antialias=False))
        assert "DINOv2's interpolate_pos_encoding" in report.resize_method
    cls = hub["cls_token"] + (hub["pos_embed"][:, :1] if registers else 0)
    torch.testing.assert_close(model.cls_token.detach(), cls)
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).shape == (1, 32)


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
    assert model.info.load_report.expanded == ["blocks.0.mlp", "blocks.1.mlp"]
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


def test_a_torchscript_release_is_refused_with_how_to_convert_it(tmp_path):
    torch.jit.script(torch.nn.Linear(2, 2)).save(str(tmp_path / "ViT-B-16.pt"))
    with pytest.raises(CheckpointError, match=r"TorchScript archive .*torch.jit.load\(path"):
        dgmoe.create_model("vit_base_patch16_clip_quickgelu_224", pretrained=str(tmp_path / "ViT-B-16.pt"), depth=1,
                           embed_dim=32, num_heads=2)


def test_a_tower_file_starts_a_classifier_whose_head_keeps_its_initialisation(io):
    """DG runs put a new head on the tower: the file has no classifier, so the head is the model's own and the
    report says so; the features are the peer's."""
    case = CASES["openai_clip_quickgelu"]
    model = dgmoe.create_model(case["model"], pretrained=str(FIXTURES / case["file"]),
                               **{**case["overrides"], "num_classes": 7}).eval()
    assert model.info.load_report.initialised == ["head"] and "initialised, not in the checkpoint: head" in \
        model.info.load_report.summary()
    with torch.no_grad():
        features = model.forward_head(model.forward_features(io["openai_clip_quickgelu.x"]), pre_logits=True)
    torch.testing.assert_close(features, io["openai_clip_quickgelu.out"], rtol=1e-5, atol=1e-5)


def _file(case: str) -> dict[str, torch.Tensor]:
    path = FIXTURES / CASES[case]["file"]
    return load_file(str(path)) if path.suffix == ".safetensors" else torch.load(path, weights_only=True)


@pytest.mark.parametrize("variant", ["clip_model", "bare_visual"])
def test_other_layouts_of_the_same_formats(variant, io, tmp_path):
    """A whole Hugging Face `CLIPModel` (text tower and logit scale dropped) and an open_clip
    `model.visual.state_dict()` (no `visual.` prefix) load as their formats, to the same outputs."""
    if variant == "clip_model":
        name, fmt = "hf_clip_with_projection", "hf_clip"
        state = {**_file(name), "text_model.embeddings.token_embedding.weight": torch.zeros(10, 16),
                 "text_projection.weight": torch.zeros(48, 16), "logit_scale": torch.tensor(2.6)}
    else:
        name, fmt = "openai_clip_quickgelu", "openai_clip"
        state = {k[len("visual."):]: v for k, v in _file(name).items() if k.startswith("visual.")}
    path = tmp_path / "tower.pth"
    torch.save(state, path)
    model = dgmoe.create_model(CASES[name]["model"], pretrained=str(path), **CASES[name]["overrides"]).eval()
    assert model.info.load_report.format == fmt
    if variant == "clip_model":
        assert {"text_model", "logit_scale", "text_projection"} <= set(model.info.load_report.dropped)
    with torch.no_grad():
        torch.testing.assert_close(model(io[f"{name}.x"]), io[f"{name}.out"], rtol=1e-5, atol=1e-5)
