"""Registered models: each is a short config function holding only architecture numbers (timm style).

ViT/DeiT sizes: tiny / small / base = width 192 / 384 / 768, 3 / 6 / 12 heads, 12 blocks, MLP ratio 4.
GMoE (Li et al., ICLR 2023): MoE in the `last-two` blocks (0-indexed 8 and 10), 6 experts, top-2 cosine
router (§4.3, App. C), started from the dense ViT of the same size (its dense twin, App. C.2). Every function
accepts timm-style overrides and MoE options (see `MoEConfig`).
"""
from __future__ import annotations

from dgmoe.models.builder import build_vit
from dgmoe.models.registry import register_model

TINY = dict(patch_size=16, embed_dim=192, depth=12, num_heads=3)
SMALL = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6)
BASE = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12)
GMOE = dict(num_experts=6, top_k=2, router="cosine")


@register_model
def vit_tiny_patch16_224(**kwargs):
    return build_vit("vit_tiny_patch16_224", TINY, **kwargs)


@register_model
def vit_small_patch16_224(**kwargs):
    return build_vit("vit_small_patch16_224", SMALL, **kwargs)


@register_model
def vit_base_patch16_224(**kwargs):
    return build_vit("vit_base_patch16_224", BASE, **kwargs)


@register_model
def deit_tiny_patch16_224(**kwargs):
    return build_vit("deit_tiny_patch16_224", TINY, **kwargs)


@register_model
def deit_small_patch16_224(**kwargs):
    return build_vit("deit_small_patch16_224", SMALL, **kwargs)


@register_model
def deit_base_patch16_224(**kwargs):
    return build_vit("deit_base_patch16_224", BASE, **kwargs)


@register_model
def gmoe_tiny_patch16_224(**kwargs):
    return build_vit("gmoe_tiny_patch16_224", TINY, layout="last-two", moe_defaults=GMOE,
                     dense_twin=vit_tiny_patch16_224.__name__, **kwargs)


@register_model
def gmoe_small_patch16_224(**kwargs):
    return build_vit("gmoe_small_patch16_224", SMALL, layout="last-two", moe_defaults=GMOE,
                     dense_twin=vit_small_patch16_224.__name__, **kwargs)


@register_model
def gmoe_base_patch16_224(**kwargs):
    return build_vit("gmoe_base_patch16_224", BASE, layout="last-two", moe_defaults=GMOE,
                     dense_twin=vit_base_patch16_224.__name__, **kwargs)


# Small models for CPU runs, tests and the offline main job (28 px digits, 4 x 4 patches of 7 px).
MICRO = dict(img_size=28, patch_size=7, embed_dim=96, depth=6, num_heads=3)


@register_model
def vit_micro_patch7_28(**kwargs):
    return build_vit("vit_micro_patch7_28", MICRO, **kwargs)


@register_model
def gmoe_micro_patch7_28(**kwargs):
    """GMoE's recipe on the micro ViT: MoE in blocks 2 and 4 (last-two of 6), 6 experts, top-2 cosine."""
    return build_vit("gmoe_micro_patch7_28", MICRO, layout="last-two", moe_defaults=GMOE,
                     dense_twin=vit_micro_patch7_28.__name__, **kwargs)
