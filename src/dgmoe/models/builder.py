"""The one builder of the ViT family: dense ViT/DeiT, GMoE, SF-MoE, Hybrid SF-MoE and MoGE are a
VisionTransformer whose blocks follow a layout (`moe_layers`: 'S' blocks get a sparse `MoEMlp`), with
the MoE config's routing deciding the rest (image routing adds MoGE's location encoder). Every model leaves
here with its `ModelInfo`."""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from dgmoe.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from dgmoe.models.info import VIT_HPARAMS, ModelInfo, given
from dgmoe.models.layout import resolve_layout, sparse_blocks
from dgmoe.models.moge_vit import MoGEVisionTransformer, location_encoder_for
from dgmoe.models.vit import VisionTransformer
from dgmoe.moe.config import MoEConfig
from dgmoe.moe.layer import MoEMlp

MOE_FIELDS = {f.name for f in dataclasses.fields(MoEConfig)}
#: a model's input normalisation, (mean, std) per RGB channel (`ModelInfo.mean`, `ModelInfo.std`)
Stats = tuple[tuple[float, float, float], tuple[float, float, float]]
#: MoGE's model-level settings (§2.1): the location encoder phi and its arguments.
LOCATION_FIELDS = ("location_encoder", "location_encoder_kwargs")


def split_moe_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    moe = {k: kwargs.pop(k) for k in list(kwargs) if k in MOE_FIELDS}
    return kwargs, moe


def vit_info(name: str, model: VisionTransformer, config: MoEConfig | None, layout: Sequence[str],
             in_chans: int, dense_twin: str | None = None, activation: str = "gelu",
             stats: Stats | None = None, tower: tuple[str, str] | None = None) -> ModelInfo:
    mean, std = stats if stats is not None else (IMAGENET_MEAN, IMAGENET_STD)
    return ModelInfo(architecture=name, family="vit", input_size=(in_chans, *model.patch_embed.img_size),
                     num_features=model.num_features, sparse=config if "S" in layout else None,
                     sparse_blocks=sparse_blocks(tuple(layout)), uses_metadata=model.uses_metadata,
                     hparam_kwargs=dict(VIT_HPARAMS), dense_twin=dense_twin,
                     patch_size=model.patch_embed.patch_size[0], num_prefix_tokens=model.num_prefix_tokens,
                     activation=activation, mean=mean, std=std, tower=tower)


def build_vit(name: str, arch: dict[str, Any], layout: str | Sequence[int] | None = None,
              moe_defaults: dict[str, Any] | None = None, embed_layer: Any = None,
              cls: type[VisionTransformer] = VisionTransformer, dense_twin: str | None = None,
              stats: Stats | None = None, tower: tuple[str, str] | None = None,
              **kwargs: Any) -> VisionTransformer:
    """Create a ViT whose blocks follow `moe_layers` (default: `layout`; sparse 'S' blocks get an `MoEMlp`).

    `kwargs` are timm-style architecture overrides (img_size, patch_size, in_chans, num_classes, depth,
    embed_dim, num_heads, drop_path_rate, ...) plus `MoEConfig` fields (num_experts, top_k, router, ...) and,
    for image routing, `location_encoder` / `location_encoder_kwargs`. `dense_twin`: the registered dense
    model whose checkpoints this one starts from (`ModelInfo.dense_twin`); `stats`: the input normalisation
    its weights were trained with (default ImageNet's); `tower`: (label, paper) of the foundation model's tower
    it is or starts from (`ModelInfo.tower`). The experts use the backbone's `activation`.
    """
    kwargs = {**arch, **given(kwargs)}
    placement = kwargs.pop("moe_layers", layout)
    if isinstance(placement, Sequence) and not isinstance(placement, str):
        placement = [int(i) for i in placement]
    kwargs, moe_kwargs = split_moe_kwargs(kwargs)
    if moe_kwargs and placement is None:
        raise ValueError(f"{name} is a dense model; MoE options {sorted(moe_kwargs)} need moe_layers=...")
    config = MoEConfig(**{**(moe_defaults or {}), **moe_kwargs})
    depth = kwargs.get("depth", 12)
    block_layout = resolve_layout(placement, depth)
    if config.routing == "image" and "S" not in block_layout:
        raise ValueError(f"{name}: placement {placement!r} selects no block of a depth-{depth} ViT")
    dim = kwargs.get("embed_dim", 768)
    hidden = int(dim * kwargs.get("mlp_ratio", 4.0))
    context_dim = None
    if config.routing == "image":
        encoder = location_encoder_for({k: kwargs.pop(k) for k in LOCATION_FIELDS if k in kwargs})
        context_dim, cls, kwargs["location_encoder"] = getattr(encoder, "out_dim"), MoGEVisionTransformer, encoder

    activation = kwargs.get("activation", "gelu")

    def block_mlp(i: int) -> MoEMlp | None:
        return MoEMlp(dim, hidden, config, context_dim, activation) if block_layout[i] == "S" else None

    if embed_layer is not None:
        kwargs["embed_layer"] = embed_layer
    model = cls(block_mlps=block_mlp, **kwargs)
    model.info = vit_info(name, model, config, block_layout, kwargs.get("in_chans", 3), dense_twin, activation,
                          stats, tower)
    return model
