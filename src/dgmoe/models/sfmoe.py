"""SF-MoE (Li et al., "Sparse Fusion Mixture-of-Experts are Domain Generalizable Learners").

Sparse blocks S (attention + MoE) and fusion blocks F (attention + dense FFN, hidden 4d) in a layout such
as the paper's default `[S,F]x6` (§2.2-2.3, Fig. 4). The router is linear: softmax(W x + eps),
eps ~ N(0, 1/N^2), top-2 (eq. 1). Hybrid SF-MoE (§2.4) replaces the patch embedding with the ResNet-26
stem of timm's `vit_small_r26_s32_224`, whose checkpoints load strictly.
"""
from __future__ import annotations

from dgmoe.models.builder import build_vit
from dgmoe.models.hybrid import HybridEmbed
from dgmoe.models.registry import register_model
from dgmoe.models.zoo import SMALL, vit_small_patch16_224

SFMOE = dict(num_experts=6, top_k=2, router="linear")
SFMOE_LAYOUT = "[S,F]x6"


@register_model
def sfmoe_small_patch16_224(**kwargs):
    return build_vit("sfmoe_small_patch16_224", SMALL, layout=SFMOE_LAYOUT, moe_defaults=SFMOE,
                     dense_twin=vit_small_patch16_224.__name__, **kwargs)


@register_model
def vit_small_r26_s32_224(**kwargs):
    """The dense hybrid ViT (R26 stem + ViT-S), timm's names."""
    kwargs.setdefault("patch_size", 1)
    return build_vit("vit_small_r26_s32_224", dict(SMALL, patch_size=1), embed_layer=HybridEmbed, **kwargs)


@register_model
def hybrid_sfmoe_small_r26_s32_224(**kwargs):
    kwargs.setdefault("patch_size", 1)
    return build_vit("hybrid_sfmoe_small_r26_s32_224", dict(SMALL, patch_size=1), layout=SFMOE_LAYOUT,
                     moe_defaults=SFMOE, embed_layer=HybridEmbed, dense_twin=vit_small_r26_s32_224.__name__, **kwargs)


__all__ = ["SFMOE", "SFMOE_LAYOUT"]
