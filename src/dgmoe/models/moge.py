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

from typing import Any, Literal

import torch
import torch.nn as nn

from dgmoe.models.builder import build_vit
from dgmoe.models.info import ModelInfo
from dgmoe.models.location.encoders import build_location_encoder
from dgmoe.models.registry import register_model
from dgmoe.models.vit import VisionTransformer
from dgmoe.models.zoo import vit_small_patch16_224, vit_tiny_patch16_224
from dgmoe.moe.aux import sparse_layers
from dgmoe.moe.layer import MoEMlp, RoutingMode, routing_context

#: MoGE's sparse layer (§2.3; App. A): image routing on r, E = 6, K = 3, cosine router on r itself, a shared
#: expert with gamma 0.5 at initialisation, t = 64 forced tokens for the CKA diversity loss.
MOGE = dict(routing="image", num_experts=6, top_k=3, router="cosine", router_dim=None, shared_expert=True,
            gamma_init=0.5, cka_tokens=64)
MOGE_LOCATION = dict(location_encoder="sh_siren")


def location_encoder_for(settings: dict[str, Any]) -> nn.Module:
    """phi from MoGE's model settings (`location_encoder`: a registered name, default SH + SIREN)."""
    return build_location_encoder(settings.get("location_encoder", MOGE_LOCATION["location_encoder"]),
                                  **(settings.get("location_encoder_kwargs") or {}))


class MoGEVisionTransformer(VisionTransformer):
    """A ViT whose image-routed sparse blocks route on r = phi(meta); `forward_features(x, meta=...)`."""

    uses_metadata = True
    info: ModelInfo  # set by build_vit

    def __init__(self, location_encoder: nn.Module, **vit_kwargs: Any):
        super().__init__(**vit_kwargs)
        self.location_encoder = location_encoder

    def moge_layers(self) -> list[MoEMlp]:
        return list(sparse_layers(self).values())

    def set_routing_mode(self, mode: RoutingMode, expert: int | None = None) -> None:
        """'routed' (eq. 1), 'shared_only' (MoGE-SE, §2.2 (i): f = f_0, no metadata needed) or 'forced'
        (every image through specialist `expert` with alpha = 1, App. A / Fig. 3)."""
        if mode not in ("routed", "shared_only", "forced"):
            raise ValueError(f"routing mode must be 'routed', 'shared_only' or 'forced', got {mode!r}")
        assert self.info.sparse is not None  # MoGE's blocks are sparse
        experts = self.info.sparse.num_experts
        if mode == "forced" and (expert is None or not 0 <= expert < experts):
            raise ValueError(f"forced routing needs expert in [0, {experts}), got {expert}")
        for layer in self.moge_layers():
            layer.mode, layer.forced_expert = mode, expert

    @property
    def routing_mode(self) -> Literal["routed", "shared_only", "forced"]:
        return self.moge_layers()[0].mode

    def context(self, meta: dict[str, torch.Tensor] | None) -> torch.Tensor:
        """r = phi(m) for a batch (validated by the location encoder)."""
        return self.location_encoder(meta)

    def forward_features(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        r = self.context(meta) if self.routing_mode == "routed" else None
        with routing_context(r):
            return super().forward_features(x)

    def forward_intermediates(self, x: torch.Tensor, *args: Any, meta: dict[str, torch.Tensor] | None = None,
                              **kwargs: Any) -> Any:
        """timm's `forward_intermediates`, the MoGE blocks routed on r = phi(meta) as in `forward_features`."""
        r = self.context(meta) if self.routing_mode == "routed" else None
        with routing_context(r):
            return super().forward_intermediates(x, *args, **kwargs)

    def forward(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, meta=meta))


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
