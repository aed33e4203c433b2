"""`create_model(name, features_only=True, out_indices=...)`: timm's feature extractors for dgmoe models.

The returned module's forward gives a list of feature maps `[B, C, H, W]` and its `feature_info` says, per
map, its channels (`num_chs`), its stride in input pixels (`reduction`) and the module it comes from
(`module`), with timm's accessors (`channels()`, `reduction()`, `module_name()`, `get_dicts()`). The levels,
their defaults and the state-dict names are timm's (checked against timm 1.0 in
tests/models/test_models_features.py):

- ResNet (timm's `FeatureListNet`): 5 levels, the stem activation `act1` (stride 2) and `layer1`..`layer4`
  (strides 4..32); `out_indices` defaults to all five. The modules after the last level asked for, the pooling
  and `fc` are dropped; parameter names stay the ResNet's (`conv1.weight`, `layer1.0.conv1.weight`, ...).
- ViT family, GMoE, SF-MoE, hybrid, MoGE and ERM+LE included (timm's `FeatureGetterNet`): one level per
  block, `blocks.{i}`, the block's output without the final norm and without the class token, reshaped to
  the patch grid (stride = the patch size, 32 for the R26 hybrid); `out_indices` defaults to 3, the last three
  blocks. The blocks after the last level, the final norm and the head are dropped; parameter names are the
  ViT's under `model.`. MoGE takes its metadata as `features(x, meta=...)`.

`out_indices` is an int n (the last n levels) or a sequence of levels (negative ones from the end). Unlike
timm, an unsorted or repeated sequence is sorted and deduplicated, so `feature_info` and the outputs always
agree (timm returns features in network order but reports `feature_info` in the order given).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn as nn

from dgmoe.errors import UsageError
from dgmoe.models.resnet import ResNet
from dgmoe.models.vit import VisionTransformer, take_indices

#: timm's default `out_indices` per family.
DEFAULT_OUT_INDICES: dict[str, int | tuple[int, ...]] = {"resnet": (0, 1, 2, 3, 4), "vit": 3}


class FeatureInfo:
    """timm's `FeatureInfo`: `info` holds every level's dict (`num_chs`, `reduction`, `module`, `index`),
    `out_indices` the levels a forward returns. Accessors with `idx=None` answer for `out_indices`; an int or
    a list of ints indexes every level (timm's semantics)."""

    def __init__(self, info: list[dict[str, Any]], out_indices: Sequence[int]):
        self.info = [dict(level, index=i) for i, level in enumerate(info)]
        self.out_indices = tuple(out_indices)

    def get(self, key: str, idx: int | Sequence[int] | None = None) -> Any:
        if idx is None:
            return [self.info[i][key] for i in self.out_indices]
        if isinstance(idx, int):
            return self.info[idx][key]
        return [self.info[i][key] for i in idx]

    def get_dicts(self, keys: Sequence[str] | None = None, idx: int | Sequence[int] | None = None) -> Any:
        def pick(i: int) -> dict[str, Any]:
            return self.info[i] if keys is None else {k: self.info[i][k] for k in keys}

        if idx is None:
            return [pick(i) for i in self.out_indices]
        return pick(idx) if isinstance(idx, int) else [pick(i) for i in idx]

    def channels(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("num_chs", idx)

    def reduction(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("reduction", idx)

    def module_name(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("module", idx)

    def __getitem__(self, item: int) -> dict[str, Any]:
        return self.info[item]

    def __len__(self) -> int:
        return len(self.info)


def resnet_levels(model: ResNet) -> list[dict[str, Any]]:
    """A ResNet's five feature levels, as timm's `ResNet.feature_info`."""
    levels = [dict(num_chs=model.bn1.num_features, reduction=2, module="act1")]
    for i in range(1, 5):
        layer = getattr(model, f"layer{i}")
        levels.append(dict(num_chs=layer[-1].bn3.num_features, reduction=2 ** (i + 1), module=f"layer{i}"))
    return levels


class ResNetFeatures(nn.ModuleDict):
    """A ResNet's stem and stages up to the last level asked for (timm's `FeatureListNet`)."""

    def __init__(self, model: ResNet, out_indices: int | Sequence[int]):
        levels = resnet_levels(model)
        take = take_indices(len(levels), out_indices)
        modules = [("conv1", model.conv1), ("bn1", model.bn1), ("act1", model.relu), ("maxpool", model.maxpool),
                   *[(f"layer{i}", getattr(model, f"layer{i}")) for i in range(1, 5)]]
        returned = [levels[i]["module"] for i in take]
        last = [name for name, _ in modules].index(returned[-1])
        super().__init__(dict(modules[:last + 1]))
        self.return_layers = returned
        self.feature_info = FeatureInfo(levels, take)
        self.freeze_bn = model.freeze_bn

    def train(self, mode: bool = True) -> "ResNetFeatures":
        super().train(mode)
        if mode and self.freeze_bn:  # as `ResNet(freeze_bn=True)`
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        return self

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out.append(x)
        return out


class ViTFeatures(nn.Module):
    """A ViT's block outputs at the patch grid (timm's `FeatureGetterNet` over `forward_intermediates`)."""

    def __init__(self, model: VisionTransformer, out_indices: int | Sequence[int]):
        super().__init__()
        embed: Any = model.patch_embed
        reduction = getattr(embed, "reduction", embed.patch_size[0])
        levels = [dict(module=f"blocks.{i}", num_chs=model.embed_dim, reduction=reduction)
                  for i in range(len(model.blocks))]
        take = take_indices(len(levels), out_indices)
        model.prune_intermediate_layers(take, prune_norm=True, prune_head=True)
        self.model = model
        self.out_indices = take
        self.feature_info = FeatureInfo(levels, take)

    def forward(self, x: torch.Tensor, **kwargs: Any) -> list[torch.Tensor]:
        """`kwargs`: what the model's `forward_intermediates` takes besides the image (MoGE: `meta`)."""
        features = self.model.forward_intermediates(x, indices=self.out_indices, intermediates_only=True, **kwargs)
        assert isinstance(features, list)
        return features


def features_model(model: nn.Module, out_indices: int | Sequence[int] | None = None,
                   name: str | None = None) -> nn.Module:
    """`model` as a feature extractor (see the module docstring); `out_indices=None` is timm's default."""
    label = name or type(model).__name__
    if isinstance(model, ResNet):
        family: type[nn.Module] = ResNetFeatures
        default = DEFAULT_OUT_INDICES["resnet"]
    elif isinstance(model, VisionTransformer):
        family, default = ViTFeatures, DEFAULT_OUT_INDICES["vit"]
    else:
        raise UsageError(f"features_only=True supports the ResNet and ViT families (ViT/DeiT, GMoE, SF-MoE, hybrid, "
                         f"MoGE, ERM+LE), not {label}; use its forward_features(x) for the last feature map, or "
                         f"num_classes=0 for pooled features")
    return family(model, default if out_indices is None else out_indices)
