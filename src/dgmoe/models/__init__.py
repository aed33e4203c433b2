"""Models: a registry of named configs and `create_model` (timm's factory, `dgmoe.models.factory`)."""
from __future__ import annotations

import torch.nn as nn

# explicit imports make registration visible (erm_le: the ERM+LE backbone)
from dgmoe.models import erm_le, foundation, moge, resnet, sfmoe, zoo  # noqa: F401
from dgmoe.models.factory import create_model
from dgmoe.models.registry import MODELS, list_models, register_model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["MODELS", "count_parameters", "create_model", "list_models", "register_model"]
