"""ERM+LE: a ViT whose classifier sees [image features || MLP(phi(m))] (MoGE Table 1, after D3G / Crasto & Rolf).

The location embedding is a registered location encoder (default: the parameter-free spherical harmonics
with L = 10) followed by a 2-layer MLP (Linear, ReLU, Linear; MoGE §3: "location encodings with a 2-layer
MLP"), concatenated with the pooled image features and passed to one linear head. Train it with plain ERM.

`forward_features(x, meta)` returns the image tokens and keeps the batch's location embedding for the
`forward_head` call that follows (the timm two-step API has no argument for it).
"""
from __future__ import annotations

from typing import Any, Sequence, cast

import torch
import torch.nn as nn

from dgmoe.models.builder import build_vit
from dgmoe.models.location.encoders import build_location_encoder
from dgmoe.models.registry import register_model
from dgmoe.models.vit import VisionTransformer
from dgmoe.models.zoo import vit_tiny_patch16_224

#: ERM+LE's own arguments beyond the location encoder's (`builder.LOCATION_FIELDS`): the MLP's widths
LE_FIELDS = ("le_hidden", "le_dim")


class LocationConcatViT(VisionTransformer):
    """ViT + location embedding concatenated before the classifier (ERM+LE)."""

    uses_metadata = True

    def __init__(self, location_encoder: str = "sh", location_encoder_kwargs: dict[str, Any] | None = None,
                 le_hidden: int = 256, le_dim: int = 256, **vit_kwargs: Any):
        super().__init__(**vit_kwargs)
        self.location_encoder = build_location_encoder(location_encoder, **(location_encoder_kwargs or {}))
        out_dim = cast(int, self.location_encoder.out_dim)  # every location encoder has one
        self.location_mlp = nn.Sequential(nn.Linear(out_dim, le_hidden), nn.ReLU(),
                                          nn.Linear(le_hidden, le_dim))
        self.le_dim = le_dim
        self.num_features = self.embed_dim + le_dim
        self.reset_classifier(self.num_classes)
        self._location: torch.Tensor | None = None

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        width = self.embed_dim + getattr(self, "le_dim", 0)
        self.head = nn.Linear(width, num_classes) if num_classes > 0 else nn.Identity()
        if isinstance(self.head, nn.Linear):
            nn.init.trunc_normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)

    def prune_intermediate_layers(self, indices: int | Sequence[int] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """timm's API; pruning the head also drops the location embedding, which only the head reads."""
        kept = super().prune_intermediate_layers(indices, prune_norm, prune_head)
        if prune_head:
            del self.location_encoder, self.location_mlp
            self.le_dim = 0
            self.num_features = self.embed_dim
        return kept

    def forward_features(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        self._location = self.location_mlp(self.location_encoder(meta).to(x.dtype))
        return super().forward_features(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        loc = self._location
        if loc is None or loc.shape[0] != x.shape[0]:
            raise RuntimeError("LocationConcatViT.forward_head needs the location embedding of the same batch: "
                               "call forward_features(x, meta=...) first")
        pooled = x[:, self.num_prefix_tokens:].mean(dim=1) if self.global_pool == "avg" else x[:, 0]
        feats = self.head_drop(torch.cat([self.fc_norm(pooled), loc], dim=1))
        return feats if pre_logits else self.head(feats)

    def forward(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, meta=meta))


@register_model
def vit_le_tiny_patch16_224(**kwargs: Any) -> LocationConcatViT:
    """ERM+LE backbone: ViT-Tiny/16 + SH(L=10) -> 2-layer MLP (256) concatenated before the head."""
    arch = dict(patch_size=16, embed_dim=192, depth=12, num_heads=3)
    model = build_vit("vit_le_tiny_patch16_224", arch, cls=LocationConcatViT, dense_twin=vit_tiny_patch16_224.__name__,
                      **kwargs)
    assert isinstance(model, LocationConcatViT)
    return model
