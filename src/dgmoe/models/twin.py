"""A model's dense twin: the registered dense model whose checkpoints `pretrained=` adapts to it
(`ModelInfo.dense_twin`; GMoE App. C.2: experts copied from a DeiT's FFN; MoGE §2.3: MoGE blocks on an
ImageNet-pretrained ViT-Tiny), and a checkpoint of that twin written at the model's own geometry, so that the
dense-to-sparse path can be exercised without downloaded weights (the contract tests, the recipes' smoke scale).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dgmoe.atomic import atomic_path, save_safetensors_atomic
from dgmoe.models.builder import LOCATION_FIELDS, MOE_FIELDS
from dgmoe.models.erm_le import LE_FIELDS
from dgmoe.models.info import describe_model

#: arguments only a sparse or located model takes (MoE options, the block placement, a location embedding);
#: its dense twin is built without them
SPARSE_ONLY_KWARGS = frozenset({*MOE_FIELDS, "moe_layers", *LOCATION_FIELDS, *LE_FIELDS})


def dense_twin(name: str, **kwargs: Any) -> tuple[str, dict[str, Any]]:
    """(registered name, kwargs) of the dense model whose checkpoints `create_model(name, pretrained=...,
    **kwargs)` loads: the model's declared twin (itself for a dense model) at the same architecture overrides."""
    twin = describe_model(name, **kwargs).dense_twin or name
    return twin, {k: v for k, v in kwargs.items() if k not in SPARSE_ONLY_KWARGS}


def write_dense_checkpoint(path: str | Path, name: str, seed: int = 0, **kwargs: Any) -> Path:
    """Write a timm-format `.safetensors` (or, for another suffix, a `torch.save`d state dict) of `name`'s dense
    twin built with `kwargs` and weights drawn from `seed` (the global RNG is left as it was), atomically;
    returns `path`."""
    from dgmoe.models.factory import create_model

    twin, twin_kwargs = dense_twin(name, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        state = {k: v.contiguous() for k, v in create_model(twin, **twin_kwargs).state_dict().items()}
    path = Path(path)
    if path.suffix == ".safetensors":
        save_safetensors_atomic(path, state)
    else:
        with atomic_path(path) as tmp:
            torch.save(state, tmp)
    return path
