"""torch.compile for dgmoe's models, block by block.

`compile_blocks(model)` compiles, in place, each repeated block of a model (`nn.Module.compile`: the
module keeps its parameters, names and state dict; only its call runs through dynamo). Blocks rather than
the whole model because algorithms call `forward_features` / `forward_head` (timm's API), which a
compiled `forward` would not cover, and because identical blocks share one compiled graph: a GMoE ViT
compiles two graphs (its dense and its sparse block), whatever its depth. Models without `blocks` (ResNet)
compile their top-level children (stem, stages, head).

With stochastic depth every block has its own drop-path rate, a Python float that dynamo specialises on:
one graph per block. Blocks share one code object, whose graphs dynamo caps at its recompile limit (8);
past it the remaining blocks ran eagerly (seen on an H200 with GMoE-S/16, whose DomainBed hyperparameters
drop paths). `compile_blocks` raises the limit to cover two variants of every unit it compiles.

The sparse layers compile without graph breaks or recompiles in bf16 (their dispatch has fixed shapes,
`dgmoe.moe.sync_free`, and their auxiliary terms are held in tensors); in fp32 the dispatch runs eagerly
between graphs (torch's grouped GEMM is traced in bf16 only). docs/design.md, "torch.compile".
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn


def compile_units(model: nn.Module) -> list[nn.Module]:
    """The modules `compile_blocks` compiles: every block of every `blocks` container in `model` (and the
    patch embedding beside it), or, without any, `model`'s children."""
    units: list[nn.Module] = []
    for module in model.modules():
        blocks = getattr(module, "blocks", None)
        if isinstance(blocks, (nn.Sequential, nn.ModuleList)):
            embed = getattr(module, "patch_embed", None)
            units += ([embed] if isinstance(embed, nn.Module) else []) + list(blocks)
    return units or list(model.children())


def compile_blocks(model: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """Compile `model`'s blocks in place (`torch.compile` keyword arguments apply to each); returns `model`.
    Blocks already compiled are left as they are (their compiled graphs are kept)."""
    units = compile_units(model)
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # (torch < 2.6)
    setattr(config, name, max(getattr(config, name), 2 * len(units)))
    for unit in units:
        if getattr(unit, "_compiled_call_impl", None) is None:
            unit.compile(**compile_kwargs)
    return model
