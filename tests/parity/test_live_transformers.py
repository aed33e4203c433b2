"""Live, full-size, where transformers is installed (an optional job, `-m slow` with the peers on the path:
`PYTHONPATH=/path/to/peers python -m pytest -m slow tests/parity/test_live_transformers.py`, once with
transformers 4 and once with 5): transformers' own DINOv2 S/14 and B/14 with and without registers, at the
hub's 518 px grid, and a ViT-B/16 `CLIPVisionModel`, with their own random initialisation, written by
`save_pretrained` and loaded into dgmoe's towers at 224 px; dgmoe equals transformers' forward. The default
suite checks the same formats on tiny recorded files (test_checkpoint_formats_parity.py)."""
import pytest
import torch

import dgmoe

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name, width, heads", [
    ("vit_small_patch14_dinov2", 384, 6), ("vit_base_patch14_dinov2", 768, 12),
    ("vit_small_patch14_reg4_dinov2", 384, 6), ("vit_base_patch14_reg4_dinov2", 768, 12)])
def test_transformers_dinov2_at_224_px(name, width, heads, tmp_path):
    transformers = pytest.importorskip("transformers")
    registers = "_reg4" in name
    common = dict(hidden_size=width, num_hidden_layers=12, num_attention_heads=heads, image_size=518, patch_size=14)
    torch.manual_seed(0)
    peer = (transformers.Dinov2WithRegistersModel(transformers.Dinov2WithRegistersConfig(num_register_tokens=4,
                                                                                          **common))
            if registers else transformers.Dinov2Model(transformers.Dinov2Config(**common))).eval()
    peer.save_pretrained(str(tmp_path))
    model = dgmoe.create_model(name, num_classes=0, pretrained=str(tmp_path / "model.safetensors")).eval()
    assert model.info.load_report.format == "hf_dinov2" and model.info.load_report.resized == ["pos_embed"]
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        out = peer(pixel_values=x)
        tokens = model.forward_features(x)
    torch.testing.assert_close(model.forward_head(tokens), out.pooler_output, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tokens, out.last_hidden_state, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act, name", [("gelu", "vit_base_patch16_clip_224"),
                                       ("quick_gelu", "vit_base_patch16_clip_quickgelu_224")])
def test_transformers_clip_vision_model_b16(act, name, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.CLIPVisionConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                           num_attention_heads=12, image_size=224, patch_size=16, hidden_act=act)
    peer = transformers.CLIPVisionModel(config).eval()
    peer.save_pretrained(str(tmp_path))
    model = dgmoe.create_model(name, num_classes=0, proj_dim=0, pretrained=str(tmp_path / "model.safetensors")).eval()
    report = model.info.load_report
    assert report.format == "hf_clip" and "stated by config.json hidden_act" in report.activation
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(pixel_values=x).pooler_output, rtol=1e-4, atol=1e-4)
