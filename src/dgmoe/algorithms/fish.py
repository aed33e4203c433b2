"""Fish: gradient matching for DG (Shi et al., ICLR 2022, Algorithm 1), as the authors' DomainBed code.

Each update copies the network, takes one inner step per training domain in turn on the copy, and moves
the network towards the copy: theta <- theta + meta_lr (theta_inner - theta). To first order this ascends
the inner product of the domains' gradients. DomainBed's version (the authors') creates a fresh Adam for
the inner loop at every update and visits the domains in order; `fish_inner_optimizer='sgd'` gives the
paper's plain SGD inner steps. The outer `optimizer` is never stepped (Fish moves the weights itself).
Each inner objective adds the copy's MoE auxiliary loss once.
"""
from __future__ import annotations

import copy

import torch

from dgmoe.algorithms.averaging import averaged_tensors, copy_integer_buffers
from dgmoe.algorithms.base import Algorithm, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, choice, fixed
from dgmoe.moe.aux import clear_moe_aux


@torch.no_grad()
def fish_meta_step(weights: list[torch.Tensor], inner: list[torch.Tensor], meta_lr: float) -> None:
    """weights <- weights + meta_lr * (inner - weights), in place."""
    torch._foreach_lerp_(weights, inner, meta_lr)


@register_algorithm
class Fish(Algorithm):
    DESCRIPTION = "Fish: sequential per-domain inner steps, then a Reptile-style meta step (gradient matching)"
    REFERENCE = "Shi et al., Gradient Matching for Domain Generalization, ICLR 2022"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "meta_lr": HParam(0.5, choice([0.05, 0.1, 0.5])),
        "fish_inner_optimizer": HParam("adam", fixed("adam")),
    }

    def _inner_optimizer(self, params) -> torch.optim.Optimizer:
        kind = self.hparams["fish_inner_optimizer"]
        if kind == "adam":
            return torch.optim.Adam(params, lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"])
        if kind == "sgd":
            return torch.optim.SGD(params, lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"])
        raise ValueError(f"fish_inner_optimizer must be 'adam' or 'sgd', got {kind!r}")

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        # Registered while it lives, so that `sync_gradients` (multi-process runs) averages its gradients.
        self.inner = inner = copy.deepcopy(self.network)
        try:
            opt = self._inner_optimizer([p for p in inner.parameters() if p.requires_grad])
            losses, auxes = [], []
            for b in minibatches:
                task = cross_entropy(self.logits(b.x, b.meta, inner), b.y)
                aux = self.moe_aux_loss(inner)
                self.step(task + aux, opt)
                clear_moe_aux(inner)
                losses.append(task.item())
                auxes.append(aux.item())
            # Averaged float state (parameters and BatchNorm statistics) moves towards the copy.
            fish_meta_step(averaged_tensors(self.network), averaged_tensors(inner), self.hparams["meta_lr"])
            copy_integer_buffers(inner, self.network)
        finally:
            del self.inner
        mean_task, mean_aux = sum(losses) / len(losses), sum(auxes) / len(auxes)
        return {"loss": mean_task + mean_aux, "loss_task": mean_task, "loss_aux": mean_aux}
