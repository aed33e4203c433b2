"""Invariant risk minimisation, IRMv1 (Arjovsky et al., 2019, eq. IRMv1 and App. D).

The penalty is the squared gradient of each domain's risk with respect to a dummy classifier scale
w = 1.0: ||d/dw R^e(w * logits)||^2. DomainBed (and the paper's App. D code) estimates it without bias as
the product of the gradients on the even and odd halves of the domain's batch; `irm_penalty(...,
unbiased=False)` gives the plain squared gradient.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dgmoe.algorithms.base import (
    Algorithm,
    at_least_fp32,
    concat_batches,
    domain_risk,
    penalty_weight,
    split_sizes,
)
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, as_int, log_uniform, non_negative
from dgmoe.sharding import Shard, all_reduce_sum


def irm_penalty(logits: torch.Tensor, y: torch.Tensor, unbiased: bool = True,
                shard: Shard | None = None) -> torch.Tensor:
    """||grad_w CE(w * logits, y)||^2 at w = 1 (unbiased: halves' gradient product). The halves are the even
    and odd positions of the domain's minibatch (the whole minibatch's, under multi-process training)."""
    scale = torch.ones((), device=logits.device, dtype=at_least_fp32(logits).dtype, requires_grad=True)
    logits = at_least_fp32(logits)
    if shard is None:
        if not unbiased:
            (g,) = torch.autograd.grad(F.cross_entropy(logits * scale, y), [scale], create_graph=True)
            return g.pow(2)
        (g1,) = torch.autograd.grad(F.cross_entropy(logits[::2] * scale, y[::2]), [scale], create_graph=True)
        (g2,) = torch.autograd.grad(F.cross_entropy(logits[1::2] * scale, y[1::2]), [scale], create_graph=True)
        return g1 * g2
    grads = []
    for half in ((0, 1) if unbiased else (None,)):
        rows = torch.ones_like(shard.index, dtype=torch.bool) if half is None else shard.index % 2 == half
        count = shard.size if half is None else (shard.size + 1 - half) // 2
        local = F.cross_entropy(logits[rows] * scale, y[rows], reduction="sum")
        (g,) = torch.autograd.grad(local, [scale], create_graph=True)
        grads.append(all_reduce_sum(g, shard) / count)
    return grads[0] * grads[1] if unbiased else grads[0].pow(2)


@register_algorithm
class IRM(Algorithm):
    DESCRIPTION = ("Invariant risk minimisation (IRMv1): penalise the gradient of each domain's risk "
                   "w.r.t. a dummy scale")
    REFERENCE = "Arjovsky et al., Invariant Risk Minimization, arXiv:1907.02893, 2019"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "irm_lambda": HParam(1e2, log_uniform(-1, 5), non_negative),
        "irm_penalty_anneal_iters": HParam(500, as_int(log_uniform(0, 4)), non_negative),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.count_updates()

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        count = int(self.update_count)
        anneal = self.hparams["irm_penalty_anneal_iters"]
        weight = penalty_weight(count, anneal, self.hparams["irm_lambda"], 1.0)
        logits = self.logits(concat_batches(minibatches)).split(split_sizes(minibatches))
        nll = torch.stack([domain_risk(lg, b) for lg, b in zip(logits, minibatches)]).mean()
        penalty = torch.stack([irm_penalty(lg, b.y, shard=b.shard) for lg, b in zip(logits, minibatches)]).mean()
        aux = self.moe_aux_loss()
        if count == anneal:
            self.reset_optimizer_state(self.optimizer)
        loss = nll + weight * penalty + aux
        self.step(loss)
        self.update_count += 1
        return {"loss": loss.item(), "nll": nll.item(), "penalty": penalty.item(), "loss_aux": aux.item()}
