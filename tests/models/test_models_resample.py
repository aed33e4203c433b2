"""Resampling pretrained position and patch embeddings (timm >= 0.9 by default, timm 0.5-0.6 on request),
and loading a patch-16 checkpoint into smaller-patch models, up to `dgmoe train --pretrained`.
The values against timm's own code are checked in tests/parity (recorded fixtures)."""
import json

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from safetensors.torch import save_file

import dgmoe
from dgmoe.cli import main
from dgmoe.models.resample import RESIZE_METHODS, resample_patch_embed, resize_matrix, resize_pos_embed

SMALL = dict(embed_dim=32, depth=2, num_heads=2)


def _pos(grid=(14, 14), prefix=1, dim=8):
    return torch.randn(1, prefix + grid[0] * grid[1], dim)


def test_antialias_false_is_the_previous_plain_bicubic():
    pos = _pos()
    grid = pos[:, 1:].reshape(1, 14, 14, 8).permute(0, 3, 1, 2)
    plain = F.interpolate(grid, size=(4, 4), mode="bicubic", align_corners=False).permute(0, 2, 3, 1).reshape(1, 16, 8)
    assert torch.equal(resize_pos_embed(pos, (4, 4), antialias=False), torch.cat([pos[:, :1], plain], dim=1))
    assert not torch.allclose(resize_pos_embed(pos, (4, 4)), resize_pos_embed(pos, (4, 4), antialias=False))


@pytest.mark.parametrize("prefix", [0, 1, 2])
def test_prefix_tokens_are_kept_and_grids_may_be_non_square(prefix):
    pos = _pos(prefix=prefix)
    out = resize_pos_embed(pos, (3, 5), num_prefix_tokens=prefix)
    assert out.shape == (1, prefix + 15, 8) and torch.equal(out[:, :prefix], pos[:, :prefix])
    back = resize_pos_embed(out, (2, 2), num_prefix_tokens=prefix, old_grid=(3, 5))
    assert back.shape == (1, prefix + 4, 8)
    assert resize_pos_embed(pos, (14, 14), num_prefix_tokens=prefix) is pos
    with pytest.raises(ValueError, match="not a square grid"):
        resize_pos_embed(out, (2, 2), num_prefix_tokens=prefix)


def test_low_precision_embeddings_are_resized_in_float32():
    pos = _pos()
    out = resize_pos_embed(pos.bfloat16(), (7, 7))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, resize_pos_embed(pos.bfloat16().float(), (7, 7)).bfloat16(), rtol=0, atol=0)


def _dense_pinv_resample(weight, new, antialias):
    """FlexiViT's PI-resize with the whole 2-D resize matrix (no separability), in float64."""
    old = weight.shape[-2:]
    basis = torch.eye(old[0] * old[1], dtype=torch.float64).reshape(-1, 1, *old)
    b = F.interpolate(basis, size=new, mode="bicubic", align_corners=False, antialias=antialias)
    b = b.reshape(old[0] * old[1], -1).T  # [new pixels, old pixels]
    return (weight.double().flatten(2) @ torch.linalg.pinv(b)).reshape(*weight.shape[:2], *new)


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("old,new", [(16, (8, 8)), (16, (4, 4)), (8, (16, 16)), (6, (4, 9))])
def test_patch_kernel_resample_is_the_pseudo_inverse_resize(old, new, antialias):
    w = torch.randn(5, 3, old, old)
    out = resample_patch_embed(w, new, antialias)
    torch.testing.assert_close(out.double(), _dense_pinv_resample(w, new, antialias), rtol=1e-5, atol=1e-5)


def test_upsampled_kernel_gives_the_same_token_on_the_upsampled_patch():
    """<B x, ŵ> = <x, w> exactly when the patch grows (FlexiViT §3.4)."""
    w, x = torch.randn(4, 3, 8, 8), torch.randn(6, 3, 8, 8)
    big = F.interpolate(x, size=(16, 16), mode="bicubic", align_corners=False, antialias=True)
    tokens = F.conv2d(x, w).flatten(1)
    torch.testing.assert_close(F.conv2d(big, resample_patch_embed(w, (16, 16))).flatten(1), tokens,
                               rtol=1e-4, atol=1e-4)
    assert resize_matrix(8, 16).shape == (16, 8)


def _patch16_checkpoint(tmp_path):
    torch.manual_seed(0)
    src = dgmoe.create_model("vit_tiny_patch16_224", num_classes=10, **SMALL)
    path = tmp_path / "vit_patch16.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    return src, path


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "gmoe_tiny_patch16_224"])
@pytest.mark.parametrize("antialias", [True, False])
def test_patch16_checkpoint_initialises_a_patch8_model(tmp_path, name, antialias):
    src, path = _patch16_checkpoint(tmp_path)
    extra = {"moe_layers": [1]} if name.startswith("gmoe") else {}
    model = dgmoe.create_model(name, img_size=32, patch_size=8, num_classes=3, pretrained=str(path),
                               pretrained_antialias=antialias, **SMALL, **extra)
    report = model.info.load_report
    assert report.resized == ["patch_embed.proj.weight", "pos_embed"]
    assert report.resize_method == RESIZE_METHODS[antialias] and RESIZE_METHODS[antialias] in report.summary()
    assert report.expanded == (["blocks.1.mlp"] if extra else [])
    torch.testing.assert_close(model.patch_embed.proj.weight,
                               resample_patch_embed(src.patch_embed.proj.weight, (8, 8), antialias))
    torch.testing.assert_close(model.pos_embed, resize_pos_embed(src.pos_embed, (4, 4), antialias=antialias))
    assert torch.equal(model.blocks[0].attn.qkv.weight, src.blocks[0].attn.qkv.weight)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_a_checkpoint_on_the_models_grid_is_not_resampled(tmp_path):
    _, path = _patch16_checkpoint(tmp_path)
    model = dgmoe.create_model("vit_tiny_patch16_224", num_classes=10, pretrained=str(path), **SMALL)
    assert model.info.load_report.resized == [] and model.info.load_report.resize_method is None


@pytest.mark.parametrize("patch", [8, 4])
def test_train_from_a_patch16_checkpoint_at_a_smaller_patch(tmp_path, patch):
    _, path = _patch16_checkpoint(tmp_path)
    out = tmp_path / f"run{patch}"
    args = ["train", "--dataset", "Debug28", "--img-size", "32", "--model", "gmoe_tiny_patch16_224",
            "--model-kwargs", json.dumps({**SMALL, "moe_layers": [1]}), "--pretrained", str(path),
            "--patch-size", str(patch), "--steps", "2", "--checkpoint-freq", "2", "--num-threads", "1",
            "--progress", "none", "--output-dir", str(out)]
    if patch == 4:
        args.append("--no-pretrained-antialias")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    build = json.loads((out / "config.json").read_text())["model_build"]
    assert build["kwargs"]["patch_size"] == patch and build["kwargs"]["pretrained_antialias"] == (patch == 8)
    assert "patch_embed.proj.weight, pos_embed" in build["pretrained_load"]
    assert RESIZE_METHODS[patch == 8] in build["pretrained_load"]
    assert (out / "done").exists()
