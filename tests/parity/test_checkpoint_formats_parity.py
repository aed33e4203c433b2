"""The checkpoint files users hold, against numbers recorded from the peers' own code (record_formats.py;
regenerate with the commands in fixtures/formats.json, no peer needed here): Hugging Face DINOv2 with and
without registers (`save_pretrained` folders) at 224 px and 70 px, transformers 5's `CLIPVisionModel` files
without the `vision_model.` prefix, and the activation each file or folder states, checked against the tower."""
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import dgmoe
from dgmoe.models.pretrained import CheckpointMismatchError
from dgmoe.models.resample import resize_pos_embed

FIXTURES = Path(__file__).resolve().parent / "fixtures"
META = json.loads((FIXTURES / "formats.json").read_text())
CASES = {case["case"]: case for case in META["cases"]}
WEIGHTS = {"transformers": "model.safetensors", "open_clip": "open_clip_model.safetensors"}


@pytest.fixture(scope="module")
def io():
    return load_file(str(FIXTURES / "formats_io.safetensors"))


def _file(name: str) -> Path:
    case = CASES[name]
    return FIXTURES / case["folder"] / WEIGHTS.get(case["peer"], "")


def _load(name: str, model: str | None = None, **kwargs) -> torch.nn.Module:
    case = CASES[name]
    return dgmoe.create_model(model or case["model"], pretrained=str(_file(name)),
                              **{**case["overrides"], **kwargs}).eval()


def test_fixtures_name_their_peer_version_command_and_every_tensor(io):
    assert set(META["tensors"]) == set(io) and all("record_formats.py" in c for c in META["commands"])
    versions = {c["case"]: c["peer_version"] for c in CASES.values() if c["peer"] == "transformers"}
    assert versions["hf5_clip_vision"].startswith("5.") and versions["hf_dinov2"].startswith("4.")
    for case in CASES.values():
        assert "record_formats.py" in case["command"] and (FIXTURES / case["folder"]).is_dir()


@pytest.mark.parametrize("name", ["hf_dinov2", "hf_dinov2_reg4"])
@pytest.mark.parametrize("size", [224, 70])
def test_hf_dinov2_equals_transformers_forward(name, size, io):
    """`Dinov2Model` / `Dinov2WithRegistersModel` files at their 98 px grid (7 x 7), loaded at 224 px (16 x 16)
    and 70 px (5 x 5): pooler_output and last_hidden_state equal transformers' own forward, which resamples
    the grid at every call (bicubic to the size; without antialias for Dinov2, with it for the registers)."""
    model = _load(name, img_size=size)
    report = model.info.load_report
    assert report.format == "hf_dinov2" and report.resized == ["pos_embed"]
    assert report.dropped == ["embeddings.mask_token"]
    assert "transformers'" in report.resize_method and "activation: gelu (stated by config.json" in report.summary()
    x = io[f"hf_dinov2_input.{size}.x"].float()
    with torch.no_grad():
        tokens = model.forward_features(x)
        pooled = model.forward_head(tokens)
    torch.testing.assert_close(pooled, io[f"{name}.{size}.pooler_output"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tokens, io[f"{name}.{size}.last_hidden_state"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name, sparse", [("hf_dinov2", "gmoe_small_patch14_dinov2"),
                                          ("hf_dinov2_reg4", "gmoe_small_patch14_reg4_dinov2"),
                                          ("hf5_clip_vision", "gmoe_base_patch16_clip_224")])
def test_gmoe_from_a_hugging_face_file_is_the_dense_tower(name, sparse, io):
    """GMoE App. C.2: experts copied from the FFN the file holds, so the sparse model computes the peer's."""
    size = 224 if "dinov2" in name else None
    model = _load(name, sparse, moe_layers=[0, 1], **({"img_size": size} if size else {}))
    assert model.info.load_report.expanded == ["blocks.0.mlp", "blocks.1.mlp"]
    x = io[f"hf_dinov2_input.{size}.x"].float() if size else io[f"{name}.x"]
    with torch.no_grad():
        out = model(x)
    torch.testing.assert_close(out, io[f"{name}.224.pooler_output" if size else f"{name}.out"], rtol=1e-4, atol=1e-4)


def test_hf_dinov2_resamples_as_transformers_not_as_the_hub_nor_timm(io):
    """The check can fail: transformers' Dinov2 interpolates to the size without antialias, unlike timm's
    default (antialias) and DINOv2's hub code ((new + 0.1) / old), and each gives other tokens."""
    state = load_file(str(_file("hf_dinov2")))
    source = state["embeddings.position_embeddings"]
    model = _load("hf_dinov2", img_size=224)
    own = resize_pos_embed(source, (16, 16), 1, antialias=False)
    torch.testing.assert_close(model.pos_embed.detach(), own, rtol=0, atol=0)
    for other in (resize_pos_embed(source, (16, 16), 1, antialias=True),
                  resize_pos_embed(source, (16, 16), 1, antialias=False, offset=0.1)):
        assert (other - own).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["hf5_clip_vision", "hf5_clip_with_projection", "hf4_clip_vision",
                                  "hf4_clip_with_projection", "open_clip_hub_quickgelu"])
def test_clip_folders_equal_their_peer(name, io):
    """transformers 5's `CLIPVisionModel` (no `vision_model.` prefix) and `CLIPVisionModelWithProjection`, the
    same from transformers 4, and an open_clip hub folder: each loads into the tower its folder states."""
    model = _load(name)
    assert model.info.load_report.format == ("openai_clip" if name.startswith("open_clip") else "hf_clip")
    with torch.no_grad():
        torch.testing.assert_close(model(io[f"{name}.x"]), io[f"{name}.out"], rtol=1e-5, atol=1e-5)


def test_transformers_5_writes_the_clip_vision_model_without_the_prefix():
    keys = set(load_file(str(_file("hf5_clip_vision"))))
    assert "embeddings.class_embedding" in keys and not any(k.startswith("vision_model.") for k in keys)
    assert "vision_model.embeddings.class_embedding" in set(load_file(str(_file("hf4_clip_vision"))))


# ----- activation flavour ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name, wrong, right, source", [
    ("hf4_clip_with_projection", "vit_base_patch16_clip_224", "vit_base_patch16_clip_quickgelu_224",
     "config.json hidden_act says 'quick_gelu'"),
    ("hf5_clip_vision", "vit_base_patch16_clip_quickgelu_224", "vit_base_patch16_clip_224",
     "config.json hidden_act says 'gelu'"),
    ("open_clip_hub_quickgelu", "vit_base_patch16_clip_224", "vit_base_patch16_clip_quickgelu_224",
     "open_clip_config.json quick_gelu says 'quick_gelu'"),
])
def test_a_stated_activation_other_than_the_towers_is_refused_in_one_line_naming_the_tower(name, wrong, right, source,
                                                                                             io, caplog):
    with pytest.raises(CheckpointMismatchError) as err:
        _load(name, wrong)
    text = str(err.value)
    assert "\n" not in text and source in text and f"use {right}" in text and "allow_activation_mismatch" in text
    with caplog.at_level(logging.WARNING, logger="dgmoe.models.pretrained"):
        model = _load(name, wrong, allow_activation_mismatch=True)
    assert f"use {right}" in caplog.text and "loaded anyway" in caplog.text
    assert "mismatch allowed" in model.info.load_report.activation
    with torch.no_grad():  # the wrong flavour is another function: what the check is for
        assert (model(io[f"{name}.x"]) - io[f"{name}.out"]).abs().max() > 1e-3


def test_a_whole_clip_model_config_states_its_vision_activation(tmp_path):
    folder = tmp_path / "clip"
    shutil.copytree(FIXTURES / CASES["hf4_clip_vision"]["folder"], folder)
    config = {"architectures": ["CLIPModel"], "text_config": {"hidden_act": "gelu"},
              "vision_config": {"hidden_act": "quick_gelu"}}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointMismatchError, match="config.json vision_config.hidden_act says 'quick_gelu'"):
        dgmoe.create_model("vit_base_patch16_clip_224", pretrained=str(folder / "model.safetensors"),
                           **CASES["hf4_clip_vision"]["overrides"])


def test_openai_release_keys_state_quickgelu_and_a_silent_file_says_what_was_assumed(tmp_path):
    """OpenAI's own release (its TorchScript model's state dict) holds input_resolution, context_length and
    vocab_size; a state dict without them, in a folder that states nothing, loads with the tower's activation
    named as assumed."""
    case = json.loads((FIXTURES / "foundation.json").read_text())["cases"][0]
    assert case["case"] == "openai_clip_quickgelu"
    state = torch.load(FIXTURES / case["file"], weights_only=True)
    torch.save(state, tmp_path / "silent.pth")
    model = dgmoe.create_model("vit_base_patch16_clip_224", pretrained=str(tmp_path / "silent.pth"),
                               **case["overrides"])
    assert model.info.load_report.activation == "gelu (assumed: the tower's own; the file states none)"
    assert "activation: gelu (assumed" in model.info.load_report.summary()
    state.update(input_resolution=torch.tensor(32), context_length=torch.tensor(8), vocab_size=torch.tensor(50))
    torch.save(state, tmp_path / "openai.pth")
    with pytest.raises(CheckpointMismatchError, match=r"'input_resolution' key \(OpenAI's CLIP release\) says "
                                                      r"'quick_gelu'.*use vit_base_patch16_clip_quickgelu_224"):
        dgmoe.create_model("vit_base_patch16_clip_224", pretrained=str(tmp_path / "openai.pth"), **case["overrides"])
    model = dgmoe.create_model("vit_base_patch16_clip_quickgelu_224", pretrained=str(tmp_path / "openai.pth"),
                               **case["overrides"])
    assert "stated by the state dict's 'input_resolution' key" in model.info.load_report.activation
    assert {"input_resolution", "context_length", "vocab_size"} <= set(model.info.load_report.dropped)


def test_a_sparse_variant_names_its_own_flavour_twin():
    with pytest.raises(CheckpointMismatchError, match="use gmoe_base_patch16_clip_quickgelu_224"):
        _load("hf4_clip_with_projection", "gmoe_base_patch16_clip_224", moe_layers=[1])


# ----- no format matches ----------------------------------------------------------------------------------
def test_a_file_no_format_matches_names_the_closest_format_and_what_differs(tmp_path):
    """A DINOv2 hub file whose mask_token was stripped falls through to timm's names; the error names the
    hub format and its missing marker. A timm file of another depth names timm's names as the closest."""
    foundation = FIXTURES / "foundation"
    state = torch.load(foundation / "dinov2_hub_reg4_56px.pth", weights_only=True)
    state.pop("mask_token")
    torch.save(state, tmp_path / "stripped.pth")
    tiny = dict(img_size=56, patch_size=14, embed_dim=32, depth=2, num_heads=2, num_classes=0)
    with pytest.raises(CheckpointMismatchError) as err:
        dgmoe.create_model("vit_small_patch14_reg4_dinov2", pretrained=str(tmp_path / "stripped.pth"), **tiny)
    text = str(err.value)
    assert "\n" not in text and "closest format: DINOv2 hub checkpoint" in text, text
    assert "lacks its marker key 'mask_token'" in text, text
    with pytest.raises(CheckpointMismatchError, match="closest format: timm/dgmoe state dict"):
        dgmoe.create_model("vit_small_patch14_reg4_dinov2", pretrained=str(foundation / "timm_dinov2_reg4.safetensors"),
                           **{**tiny, "depth": 3})
