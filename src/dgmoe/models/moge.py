"""MoGE: Mixture of Geographical Experts (Rangzan et al., GCPR 2026), on dgmoe's ViT.

A MoGE block is a block whose FFN is the sparse layer of `dgmoe.moe` configured for MoGE (eq. 1):

    f(x, m) = gamma * f_0(x) + (1 - gamma) * sum_k alpha_k(phi(m)) f_k(x),

image-level routing (`routing='image'`) on the metadata context r = phi(m), which the model's location
encoder computes once per forward and hands to every MoGE block (`dgmoe.moe.routing_context`), a shared
expert f_0 that is always on and a learned gamma = sigmoid(g). The router is the cosine router without a
projection: s_k(r) = <r/||r||, u_k/||u_k||> / tau, alpha = softmax over the top-K of s(r) (+ noise in
training). Routing never looks at the image. The sparse layers' auxiliary terms are load balancing over
images (App. A) and the forced-token expert CKA (eq. 2); the MoGE algorithm adds the supervised contrast
on the shared expert (eq. 3).

Defaults (§2.3): ViT-Tiny, MoGE blocks at the GMoE "last-two" positions (0-indexed 8 and 10 of 12; the
paper and README say "layers 9 and 11" without the indexing base), E = 6, K = 3, SH(L=10)+SIREN encoder.
"""
from __future__ import annotations

from typing import Any

from dgmoe.models.builder import build_vit
from dgmoe.models.moge_vit import MOGE_LOCATION, MoGEVisionTransformer, location_encoder_for
from dgmoe.models.registry import register_model
from dgmoe.models.zoo import vit_small_patch16_224, vit_tiny_patch16_224

__all__ = ["MOGE", "MoGEVisionTransformer", "build_moge", "location_encoder_for", "moge_small_patch16_224",
           "moge_tiny_patch16_224"]

#: MoGE's sparse layer (§2.3; App. A): image routing on r, E = 6, K = 3, cosine router on r itself, a shared
#: expert with gamma 0.5 at initialisation, t = 64 forced tokens for the CKA diversity loss.
MOGE = dict(routing="image", num_experts=6, top_k=3, router="cosine", router_dim=None, shared_expert=True,
            gamma_init=0.5, cka_tokens=64)


def build_moge(name: str, arch: dict[str, Any], dense_twin: str | None = None, **kwargs: Any) -> MoGEVisionTransformer:
    """A MoGE ViT: `build_vit` with MoGE's sparse layer at the GMoE "last-two" positions by default, started
    from `dense_twin`'s checkpoints (§2.3: DeiT-Ti ImageNet-pretrained)."""
    model = build_vit(name, arch, layout="last-two", moe_defaults=MOGE, dense_twin=dense_twin,
                      **{**MOGE_LOCATION, **kwargs})
    assert isinstance(model, MoGEVisionTransformer)
    return model


@register_model
def moge_tiny_patch16_224(**kwargs: Any) -> MoGEVisionTransformer:
    """MoGE on ViT-Tiny/16 (§2.3): MoGE blocks 8 and 10, E = 6, K = 3, SH(L=10) + SIREN -> 256."""
    return build_moge("moge_tiny_patch16_224", dict(patch_size=16, embed_dim=192, depth=12, num_heads=3),
                      dense_twin=vit_tiny_patch16_224.__name__, **kwargs)


@register_model
def moge_small_patch16_224(**kwargs: Any) -> MoGEVisionTransformer:
    """MoGE on ViT-S/16 (the cost comparison with GMoE-S/16)."""
    return build_moge("moge_small_patch16_224", dict(patch_size=16, embed_dim=384, depth=12, num_heads=6),
                      dense_twin=vit_small_patch16_224.__name__, **kwargs)
