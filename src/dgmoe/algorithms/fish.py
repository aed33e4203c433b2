"""Fish: gradient matching for DG (Shi et al., ICLR 2022, Algorithm 1), as the authors' DomainBed code.

Each update copies the network, takes one inner step per training domain in turn on the copy, and moves
the network towards the copy: theta <- theta + meta_lr (theta_inner - theta). To first order this ascends
the inner product of the domains' gradients. The outer `optimizer` is never stepped (Fish moves the weights
itself). Each inner objective adds the copy's MoE auxiliary loss once.

Inner optimiser: `fish_inner_optimizer='adam'` (default) is DomainBed's: the copy is fresh at every update,
but its Adam *state* (moments and step count) carries over from one update to the next, and is saved and
resumed with the run. `'sgd'` gives the paper's plain SGD inner steps (Algorithm 1, line 5).
"""
from __future__ import annotations

import copy
from typing import Any

import torch

from dgmoe.algorithms.averaging import averaged_tensors, copy_integer_buffers
from dgmoe.algorithms.base import Algorithm, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, choice, fixed, one_of
from dgmoe.moe.auxiliary import clear_aux


@torch.no_grad()
def fish_meta_step(weights: list[torch.Tensor], inner: list[torch.Tensor], meta_lr: float) -> None:
    """weights <- weights + meta_lr * (inner - weights), in place."""
    torch._foreach_lerp_(weights, inner, meta_lr)


class OptimizerState:
    """The state of an optimiser that is rebuilt at every update, kept between updates and checkpoints (it
    has the `state_dict`/`load_state_dict` pair the engine saves and restores)."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    def state_dict(self) -> dict[str, Any]:
        return self.state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = state


@register_algorithm
class Fish(Algorithm):
    DESCRIPTION = "Fish: sequential per-domain inner steps, then a Reptile-style meta step (gradient matching)"
    REFERENCE = "Shi et al., Gradient Matching for Domain Generalization, ICLR 2022"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "meta_lr": HParam(0.5, choice([0.05, 0.1, 0.5]), lambda v: None if 0 < v <= 1 else "must be in (0, 1]"),
        "fish_inner_optimizer": HParam("adam", fixed("adam"), one_of("adam", "sgd")),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        if self.hparams["fish_inner_optimizer"] not in ("adam", "sgd"):
            raise ValueError(
                f"fish_inner_optimizer must be 'adam' or 'sgd', got {self.hparams['fish_inner_optimizer']!r}")
        self.inner_state = OptimizerState()

    def optimizers(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "fish_inner": self.inner_state}

    def _inner_optimizer(self, params) -> torch.optim.Optimizer:
        lr, wd = self.hparams["lr"], self.hparams["weight_decay"]
        if self.hparams["fish_inner_optimizer"] == "sgd":
            return torch.optim.SGD(params, lr=lr, weight_decay=wd)
        opt = torch.optim.Adam(params, lr=lr, weight_decay=wd)
        if self.inner_state.state:
            opt.load_state_dict(self.inner_state.state)
        return opt

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        # Registered while it lives, so that `sync_gradients` (multi-process runs) averages its gradients.
        self.inner = inner = copy.deepcopy(self.network)
        try:
            opt = self._inner_optimizer([p for p in inner.parameters() if p.requires_grad])
            losses, auxes = [], []
            for b in minibatches:
                task = cross_entropy(self.logits(b, network=inner), b.y)
                aux = self.moe_aux_loss(inner)
                self.step(task + aux, opt)
                clear_aux(inner)
                losses.append(task.item())
                auxes.append(aux.item())
            if self.hparams["fish_inner_optimizer"] == "adam":
                self.inner_state.load_state_dict(opt.state_dict())
            # Averaged float state (parameters and BatchNorm statistics) moves towards the copy.
            fish_meta_step(averaged_tensors(self.network), averaged_tensors(inner), self.hparams["meta_lr"])
            copy_integer_buffers(inner, self.network)
        finally:
            del self.inner
        mean_task, mean_aux = sum(losses) / len(losses), sum(auxes) / len(auxes)
        return {"loss": mean_task + mean_aux, "loss_task": mean_task, "loss_aux": mean_aux}
