"""Collecting auxiliary losses from the MoE-style layers of a model.

Any module with an `aux_loss_terms: list[Tensor]` attribute takes part: it appends one scalar per
training forward. `moe_aux_loss` averages each layer's terms over the forwards since the last
`clear_moe_aux` and sums over layers, so an algorithm that runs several forwards in one update still adds
each layer's loss once (GMoE App. C.4: the total is summed over MoE layers).
"""
from __future__ import annotations

import torch
import torch.nn as nn


def aux_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if hasattr(m, "aux_loss_terms")]


def clear_moe_aux(model: nn.Module) -> None:
    for m in aux_layers(model):
        m.aux_loss_terms = []


def moe_aux_loss(model: nn.Module) -> torch.Tensor:
    total = None
    for m in aux_layers(model):
        if m.aux_loss_terms:
            term = torch.stack(m.aux_loss_terms).mean()
            total = term if total is None else total + term
    if total is None:
        device = next(model.parameters()).device
        return torch.zeros((), device=device)
    return total
