"""Foundation-model image towers and their sparse variants: CLIP (Radford et al., ICML 2021) and DINOv2
(Oquab et al., TMLR 2024; with registers: Darcet et al., ICLR 2024), built on dgmoe's `VisionTransformer`
with timm's options and names, so that their weights load by name and the PEFT targets are timm's.

- CLIP ViT-B/16, ViT-L/14: pre-norm `norm_pre` (CLIP's `ln_pre`), no patch bias, LayerNorm eps 1e-5, a
  bias-free projection `proj` to the image embedding (512 / 768), CLIP's mean/std. OpenAI's weights use
  QuickGELU (`*_clip_quickgelu_224`), OpenCLIP's trainings GELU (`*_clip_224`), as timm's names say.
- DINOv2 ViT-S/14, ViT-B/14: LayerScale (init 1e-5), LayerNorm eps 1e-6, ImageNet mean/std; `reg4`: four
  register tokens with the position embedding over the patches only (timm's layout). Built at 224 px (a
  16 x 16 grid, DomainBed's input size); `pretrained=` resamples the checkpoints' 518 px grid (37 x 37).
- GMoE on each (`gmoe_*`): MoE in the last-two blocks, 6 experts top-2 cosine (GMoE §4.3), experts copied
  from the tower's own FFN with its own activation (App. C.2); SF-MoE (`sfmoe_*`): `[S,F]` layout, linear
  router (SF-MoE §2.2-2.3).
- Stand-ins (`vit_micro_patch7_clip_quickgelu_28`, `vit_micro_patch7_clip_28`, `vit_micro_patch7_dinov2`,
  `vit_micro_patch7_reg4_dinov2`): test-sized towers of each family (28 px, 7 px patches, width 96, 6 blocks)
  with the family's own options (CLIP: pre-norm, no patch bias, QuickGELU or GELU, a projection; DINOv2:
  LayerScale, registers), for CPU tests and the recipes' smoke scale, and the GMoE twins of the CLIP-shaped
  ones (`gmoe_micro_patch7_clip_quickgelu_28`, `gmoe_micro_patch7_clip_28`: their micro text towers). No weights
  exist for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dgmoe.data.transforms import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD
from dgmoe.models.builder import Stats, build_vit
from dgmoe.models.registry import register_model
from dgmoe.models.sfmoe import SFMOE, SFMOE_LAYOUT
from dgmoe.models.zoo import GMOE

CLIP_TOWER = dict(pre_norm=True, norm_eps=1e-5)
CLIP_B16 = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12, proj_dim=512, **CLIP_TOWER)
CLIP_L14 = dict(patch_size=14, embed_dim=1024, depth=24, num_heads=16, proj_dim=768, **CLIP_TOWER)
QUICKGELU = dict(activation="quick_gelu")
DINOV2 = dict(img_size=224, patch_size=14, init_values=1e-5)
DINOV2_S14 = dict(embed_dim=384, depth=12, num_heads=6, **DINOV2)
DINOV2_B14 = dict(embed_dim=768, depth=12, num_heads=12, **DINOV2)
REG4 = dict(reg_tokens=4, no_embed_class=True)
CLIP_PAPER, OPENCLIP_PAPER = "Radford et al., ICML 2021", "Cherti et al., CVPR 2023"
DINOV2_PAPER, REGISTERS_PAPER = "Oquab et al., TMLR 2024", "Darcet et al., ICLR 2024"
#: the stand-ins' geometry: the micro ViT's (`dgmoe.models.zoo.MICRO`), a 32-d CLIP projection
MICRO_TOWER = dict(img_size=28, patch_size=7, embed_dim=96, depth=6, num_heads=3)
STAND_IN = "test-sized stand-in, no weights"


@dataclass(frozen=True)
class Tower:
    """A foundation model's image tower: what `dgmoe models` calls it, its paper, its architecture (timm's
    `VisionTransformer` options), the input normalisation its weights were trained with, and how to get its
    weights as a local file (`weights`: what a refused hub name, timm tag or missing file says for every model on
    this tower; `dgmoe.names.weights_help` reads it before torch starts, from the names block derived here)."""

    label: str
    paper: str
    arch: dict[str, Any] = field(hash=False)
    stats: Stats = (IMAGENET_MEAN, IMAGENET_STD)
    weights: str = ""


def _open_clip(arch: str, tag: str, hf: str, timm: str) -> str:
    """The recipe of a CLIP tower's weights: the full CLIP file (image and text towers) from open_clip or Hugging
    Face; timm's file holds the image tower only."""
    return (f"with open_clip, `model, _, _ = open_clip.create_model_and_transforms('{arch}', pretrained='{tag}')` "
            f"then `torch.save(model.state_dict(), 'clip.pth')`, or Hugging Face {hf}'s weights file: both hold the "
            f"image and the text tower (--head zeroshot reads both; timm's {timm} holds the image tower only); "
            "copy the file here and pass its path")


def _dinov2(hub: str, timm: str) -> str:
    return (f"`torch.save(torch.hub.load('facebookresearch/dinov2', '{hub}').state_dict(), '{hub}.pth')`, or "
            f"timm's `safetensors.torch.save_file(timm.create_model('{timm}', pretrained=True).state_dict(), "
            f"'{hub}.safetensors')`; copy the file here and pass its path")


#: the stand-ins' weights: none
NO_WEIGHTS = ("none exist for this test-sized stand-in: run it without --pretrained (its seeded initialisation; "
              "--head zeroshot then prompts a seeded random text tower)")


OPENAI_B16 = Tower("CLIP ViT-B/16 (OpenAI, QuickGELU)", CLIP_PAPER, dict(CLIP_B16, **QUICKGELU), (CLIP_MEAN, CLIP_STD),
                   weights=_open_clip("ViT-B-16", "openai", "openai/clip-vit-base-patch16",
                                      "vit_base_patch16_clip_quickgelu_224.openai"))
OPENCLIP_B16 = Tower("CLIP ViT-B/16 (OpenCLIP, GELU)", OPENCLIP_PAPER, CLIP_B16, (CLIP_MEAN, CLIP_STD),
                     weights=_open_clip("ViT-B-16", "laion2b_s34b_b88k", "laion/CLIP-ViT-B-16-laion2B-s34B-b88K",
                                        "vit_base_patch16_clip_224.laion2b"))
OPENAI_L14 = Tower("CLIP ViT-L/14 (OpenAI, QuickGELU)", CLIP_PAPER, dict(CLIP_L14, **QUICKGELU), (CLIP_MEAN, CLIP_STD),
                   weights=_open_clip("ViT-L-14", "openai", "openai/clip-vit-large-patch14",
                                      "vit_large_patch14_clip_quickgelu_224.openai"))
OPENCLIP_L14 = Tower("CLIP ViT-L/14 (OpenCLIP, GELU)", OPENCLIP_PAPER, CLIP_L14, (CLIP_MEAN, CLIP_STD),
                     weights=_open_clip("ViT-L-14", "laion2b_s32b_b82k", "laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
                                        "vit_large_patch14_clip_224.laion2b"))
DINOV2_S = Tower("DINOv2 ViT-S/14", DINOV2_PAPER, DINOV2_S14,
                 weights=_dinov2("dinov2_vits14", "vit_small_patch14_dinov2.lvd142m"))
DINOV2_S_REG = Tower("DINOv2 ViT-S/14 with 4 registers", REGISTERS_PAPER, dict(DINOV2_S14, **REG4),
                     weights=_dinov2("dinov2_vits14_reg", "vit_small_patch14_reg4_dinov2.lvd142m"))
DINOV2_B = Tower("DINOv2 ViT-B/14", DINOV2_PAPER, DINOV2_B14,
                 weights=_dinov2("dinov2_vitb14", "vit_base_patch14_dinov2.lvd142m"))
DINOV2_B_REG = Tower("DINOv2 ViT-B/14 with 4 registers", REGISTERS_PAPER, dict(DINOV2_B14, **REG4),
                     weights=_dinov2("dinov2_vitb14_reg", "vit_base_patch14_reg4_dinov2.lvd142m"))
MICRO_OPENAI = Tower("CLIP-shaped micro ViT (OpenAI's QuickGELU)", STAND_IN,
                     dict(MICRO_TOWER, proj_dim=32, **CLIP_TOWER, **QUICKGELU), (CLIP_MEAN, CLIP_STD), NO_WEIGHTS)
MICRO_OPENCLIP = Tower("CLIP-shaped micro ViT (OpenCLIP's GELU)", STAND_IN,
                       dict(MICRO_TOWER, proj_dim=32, **CLIP_TOWER), (CLIP_MEAN, CLIP_STD), NO_WEIGHTS)
MICRO_DINOV2 = Tower("DINOv2-shaped micro ViT", STAND_IN, dict(DINOV2, **MICRO_TOWER), weights=NO_WEIGHTS)
MICRO_DINOV2_REG = Tower("DINOv2-shaped micro ViT with 4 registers", STAND_IN, dict(DINOV2, **MICRO_TOWER, **REG4),
                         weights=NO_WEIGHTS)

#: every tower by its label (`dgmoe.models.info.ModelInfo.tower`'s first item)
TOWERS: dict[str, Tower] = {t.label: t for t in (
    OPENAI_B16, OPENCLIP_B16, OPENAI_L14, OPENCLIP_L14, DINOV2_S, DINOV2_S_REG, DINOV2_B, DINOV2_B_REG, MICRO_OPENAI,
    MICRO_OPENCLIP, MICRO_DINOV2, MICRO_DINOV2_REG)}


def _tower(name: str, tower: Tower, **kwargs: Any):
    return build_vit(name, tower.arch, stats=tower.stats, tower=(tower.label, tower.paper), **kwargs)


def _gmoe(name: str, tower: Tower, twin: Any, **kwargs: Any):
    return _tower(name, tower, layout="last-two", moe_defaults=GMOE, dense_twin=twin.__name__, **kwargs)


def _sfmoe(name: str, tower: Tower, twin: Any, **kwargs: Any):
    return _tower(name, tower, layout=SFMOE_LAYOUT, moe_defaults=SFMOE, dense_twin=twin.__name__, **kwargs)


# ----- CLIP image towers ----------------------------------------------------------------------------
@register_model
def vit_base_patch16_clip_224(**kwargs):
    return _tower("vit_base_patch16_clip_224", OPENCLIP_B16, **kwargs)


@register_model
def vit_base_patch16_clip_quickgelu_224(**kwargs):
    return _tower("vit_base_patch16_clip_quickgelu_224", OPENAI_B16, **kwargs)


@register_model
def vit_large_patch14_clip_224(**kwargs):
    return _tower("vit_large_patch14_clip_224", OPENCLIP_L14, **kwargs)


@register_model
def vit_large_patch14_clip_quickgelu_224(**kwargs):
    return _tower("vit_large_patch14_clip_quickgelu_224", OPENAI_L14, **kwargs)


@register_model
def gmoe_base_patch16_clip_224(**kwargs):
    return _gmoe("gmoe_base_patch16_clip_224", OPENCLIP_B16, vit_base_patch16_clip_224, **kwargs)


@register_model
def gmoe_base_patch16_clip_quickgelu_224(**kwargs):
    return _gmoe("gmoe_base_patch16_clip_quickgelu_224", OPENAI_B16, vit_base_patch16_clip_quickgelu_224, **kwargs)


@register_model
def gmoe_large_patch14_clip_224(**kwargs):
    return _gmoe("gmoe_large_patch14_clip_224", OPENCLIP_L14, vit_large_patch14_clip_224, **kwargs)


@register_model
def gmoe_large_patch14_clip_quickgelu_224(**kwargs):
    return _gmoe("gmoe_large_patch14_clip_quickgelu_224", OPENAI_L14, vit_large_patch14_clip_quickgelu_224, **kwargs)


@register_model
def sfmoe_base_patch16_clip_224(**kwargs):
    return _sfmoe("sfmoe_base_patch16_clip_224", OPENCLIP_B16, vit_base_patch16_clip_224, **kwargs)


@register_model
def sfmoe_base_patch16_clip_quickgelu_224(**kwargs):
    return _sfmoe("sfmoe_base_patch16_clip_quickgelu_224", OPENAI_B16, vit_base_patch16_clip_quickgelu_224, **kwargs)


# ----- DINOv2 ---------------------------------------------------------------------------------------
@register_model
def vit_small_patch14_dinov2(**kwargs):
    return _tower("vit_small_patch14_dinov2", DINOV2_S, **kwargs)


@register_model
def vit_small_patch14_reg4_dinov2(**kwargs):
    return _tower("vit_small_patch14_reg4_dinov2", DINOV2_S_REG, **kwargs)


@register_model
def vit_base_patch14_dinov2(**kwargs):
    return _tower("vit_base_patch14_dinov2", DINOV2_B, **kwargs)


@register_model
def vit_base_patch14_reg4_dinov2(**kwargs):
    return _tower("vit_base_patch14_reg4_dinov2", DINOV2_B_REG, **kwargs)


@register_model
def gmoe_small_patch14_dinov2(**kwargs):
    return _gmoe("gmoe_small_patch14_dinov2", DINOV2_S, vit_small_patch14_dinov2, **kwargs)


@register_model
def gmoe_small_patch14_reg4_dinov2(**kwargs):
    return _gmoe("gmoe_small_patch14_reg4_dinov2", DINOV2_S_REG, vit_small_patch14_reg4_dinov2, **kwargs)


@register_model
def gmoe_base_patch14_dinov2(**kwargs):
    return _gmoe("gmoe_base_patch14_dinov2", DINOV2_B, vit_base_patch14_dinov2, **kwargs)


@register_model
def gmoe_base_patch14_reg4_dinov2(**kwargs):
    return _gmoe("gmoe_base_patch14_reg4_dinov2", DINOV2_B_REG, vit_base_patch14_reg4_dinov2, **kwargs)


@register_model
def sfmoe_small_patch14_dinov2(**kwargs):
    return _sfmoe("sfmoe_small_patch14_dinov2", DINOV2_S, vit_small_patch14_dinov2, **kwargs)


@register_model
def sfmoe_base_patch14_dinov2(**kwargs):
    return _sfmoe("sfmoe_base_patch14_dinov2", DINOV2_B, vit_base_patch14_dinov2, **kwargs)


# ----- stand-ins: test-sized towers of each family (CPU tests, the recipes' smoke scale) ---------------
@register_model
def vit_micro_patch7_clip_quickgelu_28(**kwargs):
    return _tower("vit_micro_patch7_clip_quickgelu_28", MICRO_OPENAI, **kwargs)


@register_model
def vit_micro_patch7_clip_28(**kwargs):
    return _tower("vit_micro_patch7_clip_28", MICRO_OPENCLIP, **kwargs)


@register_model
def gmoe_micro_patch7_clip_quickgelu_28(**kwargs):
    return _gmoe("gmoe_micro_patch7_clip_quickgelu_28", MICRO_OPENAI, vit_micro_patch7_clip_quickgelu_28, **kwargs)


@register_model
def gmoe_micro_patch7_clip_28(**kwargs):
    return _gmoe("gmoe_micro_patch7_clip_28", MICRO_OPENCLIP, vit_micro_patch7_clip_28, **kwargs)


@register_model
def vit_micro_patch7_dinov2(**kwargs):
    return _tower("vit_micro_patch7_dinov2", MICRO_DINOV2, **kwargs)


@register_model
def vit_micro_patch7_reg4_dinov2(**kwargs):
    return _tower("vit_micro_patch7_reg4_dinov2", MICRO_DINOV2_REG, **kwargs)
