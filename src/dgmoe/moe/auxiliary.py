"""The sparse layers of a model and their auxiliary losses, added by algorithms generically.

`aux_losses(model)` combines each named term over the model's sparse layers (each layer's term is its mean
over the forwards since `clear_aux`, so an algorithm that runs several forwards in one update still adds
each layer's loss once): summed for load balancing (GMoE App. C.4), averaged for MoGE's expert diversity
(eq. 2 "averaged over the MoGE blocks"). `weighted_aux_loss` applies the hyperparameter that weights each
term. `AUX_LOSSES` is the one declaration of both facts.
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn as nn

from dgmoe.moe.layer import MoEMlp

#: auxiliary term -> (the hyperparameter that weights it, how the layers' terms combine): lambda of GMoE
#: eq. C.4 over the summed layers; MoGE eq. 4's lambda_CKA over the averaged MoGE blocks.
AUX_LOSSES = {"balance": ("moe_aux_weight", "sum"), "cka": ("moe_cka_weight", "mean")}
AUX_LOSS_WEIGHTS = {name: weight for name, (weight, _) in AUX_LOSSES.items()}


def sparse_layers(model: nn.Module) -> dict[str, MoEMlp]:
    """Every sparse MoE layer of `model`, by module name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MoEMlp)}


def clear_aux(model: nn.Module) -> None:
    for layer in sparse_layers(model).values():
        layer.clear_aux()


def aux_losses(model: nn.Module) -> dict[str, torch.Tensor]:
    """Each auxiliary term combined over the sparse layers ({} for a dense model or before any forward)."""
    terms: dict[str, list[torch.Tensor]] = {}
    for layer in sparse_layers(model).values():
        for name, value in layer.aux_losses().items():
            terms.setdefault(name, []).append(value)
    out = {}
    for name, values in terms.items():
        total = values[0]
        for v in values[1:]:
            total = total + v
        out[name] = total / len(values) if AUX_LOSSES[name][1] == "mean" else total
    return out


def weighted_aux_loss(model: nn.Module, hparams: Mapping[str, float]) -> torch.Tensor:
    """sum over terms of hparams[AUX_LOSS_WEIGHTS[term]] * term (a zero tensor when there is none)."""
    total = None
    for name, value in aux_losses(model).items():
        weight = AUX_LOSS_WEIGHTS[name]
        if weight not in hparams:
            raise KeyError(f"the model's sparse layers produce a {name!r} loss but the hyperparameters have no "
                           f"{weight!r} (build them with dgmoe.engine.hparams for this model)")
        total = hparams[weight] * value if total is None else total + hparams[weight] * value
    if total is None:
        device = next(model.parameters()).device
        return torch.zeros((), device=device)
    return total
