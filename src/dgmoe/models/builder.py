"""Builds sparse/dense ViTs from an architecture, a block layout and an MoE config."""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from dgmoe.models.layout import resolve_layout
from dgmoe.models.vit import VisionTransformer
from dgmoe.moe.config import MoEConfig
from dgmoe.moe.layer import MoEMlp

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
MOE_FIELDS = {f.name for f in dataclasses.fields(MoEConfig)}


def split_moe_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    moe = {k: kwargs.pop(k) for k in list(kwargs) if k in MOE_FIELDS}
    return kwargs, moe


def build_vit(name: str, arch: dict[str, Any], layout: str | Sequence[int] | None = None,
              moe_defaults: dict[str, Any] | None = None, embed_layer: Any = None,
              **kwargs: Any) -> VisionTransformer:
    """Create a ViT whose blocks follow `layout` (sparse 'S' blocks get an `MoEMlp`).

    `kwargs` are timm-style architecture overrides (img_size, patch_size, in_chans, num_classes, depth,
    embed_dim, num_heads, drop_path_rate, ...) plus MoEConfig fields (num_experts, top_k, router, ...).
    """
    kwargs = {**arch, **{k: v for k, v in kwargs.items() if v is not None}}
    placement = kwargs.pop("moe_layers", layout)
    kwargs, moe_kwargs = split_moe_kwargs(kwargs)
    if moe_kwargs and placement is None:
        raise ValueError(f"{name} is a dense model; MoE options {sorted(moe_kwargs)} need moe_layers=...")
    moe_config = MoEConfig(**{**(moe_defaults or {}), **moe_kwargs})
    depth = kwargs.get("depth", 12)
    block_layout = resolve_layout(placement, depth)
    dim = kwargs.get("embed_dim", 768)
    hidden = int(dim * kwargs.get("mlp_ratio", 4.0))

    def block_mlp(i: int):
        return MoEMlp(dim, hidden, moe_config) if block_layout[i] == "S" else None

    if embed_layer is not None:
        kwargs["embed_layer"] = embed_layer
    model = VisionTransformer(block_mlps=block_mlp, **kwargs)
    model.layout = block_layout
    model.moe_config = moe_config if "S" in block_layout else None
    model.default_cfg = {"architecture": name, "mean": IMAGENET_MEAN, "std": IMAGENET_STD,
                         "input_size": (kwargs.get("in_chans", 3), *model.patch_embed.img_size)}
    return model
