"""Models: a registry of named configs and `create_model`."""
from __future__ import annotations

from typing import Any

import torch.nn as nn

# explicit imports make registration visible
from dgmoe.models import (  # noqa: F401
    erm_le,  # ERM+LE backbone
    moge,
    resnet,
    sfmoe,
    zoo,
)
from dgmoe.models.registry import MODELS, list_models, register_model


def create_model(name: str, num_classes: int | None = None, img_size: int | None = None,
                 pretrained: str | None = None, pretrained_antialias: bool = True, **overrides: Any) -> nn.Module:
    """Build a registered model; `None` values mean "the model's default" (as timm's factory).

    `pretrained` is a local checkpoint path (timm/DeiT names, `.safetensors` or `.pth`); dense FFN
    weights are copied into every expert of the MoE blocks, position/patch embeddings are resampled to
    the model's grid and patch size (`pretrained_antialias`: as timm >= 0.9, or False as timm 0.5-0.6),
    and the load report is logged.
    """
    from dgmoe.models.pretrained import load_pretrained, missing_checkpoint

    if pretrained is True or pretrained == "True":
        raise missing_checkpoint(pretrained)
    kwargs = {k: v for k, v in dict(overrides, num_classes=num_classes, img_size=img_size).items() if v is not None}
    model = MODELS.get(name)(**kwargs)
    if pretrained:
        # torch's stubs type Module.__setattr__ for tensors and modules only; a plain attribute is fine
        model.load_report = load_pretrained(model, pretrained, antialias=pretrained_antialias)  # type: ignore[assignment]
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["MODELS", "count_parameters", "create_model", "list_models", "register_model"]
