"""Model registry: a model is a short config function registered by name (timm's style)."""
from __future__ import annotations

from typing import Callable

import torch.nn as nn

from dgmoe.registry import Registry

MODELS: Registry[Callable[..., nn.Module]] = Registry("model")


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    MODELS.add(fn.__name__, fn)
    return fn


def list_models(pattern: str | None = None) -> list[str]:
    return MODELS.names(pattern)
