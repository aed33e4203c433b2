"""CLIP's text tower declarations, formats and class names (the numbers against the peers are in
tests/parity/test_clip_text_parity.py)."""
from __future__ import annotations

import pytest
import torch
from clip_fixtures import clip_fixture_file

from dgmoe.data.catalogue import DATASETS
from dgmoe.data.class_matching import prompt_class_names
from dgmoe.errors import UsageError
from dgmoe.models.clip import text_tower as tt
from dgmoe.models.clip.text_formats import load_text_tower
from dgmoe.models.info import describe_model


@pytest.mark.parametrize("config,params", [(tt.OPENAI_B16_TEXT, 63.4e6), (tt.OPENAI_L14_TEXT, 123.6e6)])
def test_the_real_text_towers_have_clips_sizes(config, params):
    """CLIP §2.4: the base text tower is "a 63M-parameter 12-layer 512-wide model with 8 attention heads"."""
    with torch.device("meta"):
        tower = tt.TextTransformer(config)
    n = sum(p.numel() for p in tower.parameters())
    assert abs(n - params) / params < 0.005, n
    assert (config.context_length, config.vocab_size, config.width // config.heads) == (77, 49408, 64)


@pytest.mark.parametrize("model,config", [
    ("vit_base_patch16_clip_quickgelu_224", tt.OPENAI_B16_TEXT), ("vit_base_patch16_clip_224", tt.OPENCLIP_B16_TEXT),
    ("vit_large_patch14_clip_quickgelu_224", tt.OPENAI_L14_TEXT), ("vit_large_patch14_clip_224", tt.OPENCLIP_L14_TEXT),
    ("gmoe_base_patch16_clip_quickgelu_224", tt.OPENAI_B16_TEXT), ("sfmoe_base_patch16_clip_224", tt.OPENCLIP_B16_TEXT),
    ("vit_micro_patch7_clip_quickgelu_28", tt.MICRO_OPENAI_TEXT),
    ("gmoe_micro_patch7_clip_quickgelu_28", tt.MICRO_OPENAI_TEXT),
    ("gmoe_micro_patch7_clip_28", tt.MICRO_OPENCLIP_TEXT)])
def test_each_clip_image_tower_declares_its_text_tower_and_family(model, config):
    info = describe_model(model, num_classes=3)
    assert tt.text_config(info.tower, model) == config
    assert config.activation == info.activation  # QuickGELU for OpenAI's weights, GELU for OpenCLIP's
    assert config.embed_dim == describe_model(model, num_classes=0).num_features  # the image embedding's width


def test_the_text_tower_is_causal():
    tower = tt.TextTransformer(tt.MICRO_OPENCLIP_TEXT).eval()
    ids = torch.randint(1, 400, (1, 10))
    ids[0, 6] = 49407
    later = ids.clone()
    later[0, 7:] = torch.randint(1, 400, (3,))  # tokens after the end token change nothing
    with torch.no_grad():
        torch.testing.assert_close(tower(ids), tower(later))
        earlier = ids.clone()
        earlier[0, 2] = 5
        assert not torch.allclose(tower(ids), tower(earlier))


def test_openais_extra_entries_are_dropped_and_said(tmp_path):
    path = clip_fixture_file("open_clip_b16_quickgelu", tmp_path)
    state = torch.load(path, weights_only=True)
    state.update(input_resolution=torch.tensor(224), context_length=torch.tensor(77), vocab_size=torch.tensor(320))
    torch.save(state, path)
    loaded = load_text_tower(tt.OPENAI_B16_TEXT, path)
    summary = loaded.report.summary()
    assert not hasattr(loaded.tower, "load_report")  # the report is returned beside the tower, not set on it
    assert "input_resolution" in summary and "the image tower" in summary and "text_projection" in summary


def test_declared_class_names_match_the_catalogues_class_counts():
    declared = {name: DATASETS.get(name) for name in DATASETS.names() if DATASETS.get(name).class_names}
    assert {"VLCS", "PACS", "OfficeHome", "TerraIncognita", "DomainNet", "FMoW", "Camelyon17"} <= set(declared)
    #: OpenAI's ImageNet class names, as open_clip ships them, name two pairs of classes alike ("missile" for
    #: n03773504 and n04008634, "sunglasses" for n04355933 and n04356056); kept as the peers' zero-shot heads use them
    alike = {"ImageNetShifts": 2}
    for name, spec in declared.items():
        assert len(spec.class_names) == spec.num_classes == len(set(spec.class_names)) + alike.get(name, 0), name
    office_home = declared["OfficeHome"].class_names
    assert prompt_class_names("OfficeHome", [n.replace(" ", "_") for n in office_home]) == office_home  # folders
    assert prompt_class_names("FMoW", declared["FMoW"].class_names)[0] == "airport"
    assert prompt_class_names("iWildCam", ["white_tailed_deer"]) == ("white tailed deer",)  # the data's own
    with pytest.raises(UsageError, match="the data has 6 classes but the catalogue names 7"):
        prompt_class_names("PACS", ["a"] * 6)
