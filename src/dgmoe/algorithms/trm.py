"""Transfer risk minimisation, TRM (Xu & Jaakkola, "Learning Representations that Support Robust Transfer of
Predictors", arXiv:2110.09940), as DomainBed implements it (the paper's equation numbers were not checked here).

After `iters` updates of plain ERM, each update adds the transfer risk of a per-domain linear head: for
every training domain Q, a head w_Q (trained for 30 SGD steps, lr 0.1, on Q's detached features) should
also predict the other domains. With alpha a row-normalised weighting of the other domains (GroupDRO-style
exponentiated-gradient ascent, `groupdro_eta`), the penalty of domain Q is

    R_P = sum_{i != Q} alpha_Qi R_i(w_Q)  -  `cos_lambda` * <H_Q^-1 grad R_P, grad R_Q(w_Q)>,

the second term (the gradient alignment) with the inverse Hessian of R_Q in w_Q's weight approximated
by a Neumann series (10 terms, stopped once an entry exceeds 10) and the transferred gradient treated as a
constant. The update minimises CE + mean_Q R_P over the backbone and classifier (the shared Adam); then
alpha_Qi <- alpha_Qi exp(eta alpha_Qi R_i(w_Q)) (DomainBed's update, on the alpha-weighted risk).

`trm_variant='domainbed'` (default) reproduces two effects of DomainBed's in-place tensor aliasing that
change its numbers: the Neumann series' first iterate overwrites its zeroth term (h = 2 (I - H) v +
sum_{k>=2} (I - H)^k v), and the gradient of the weighted risks uses the alpha of *after* the update (the
value uses the one before). `'paper'` computes h = sum_{k>=0} (I - H)^k v and uses one alpha throughout.
DomainBed's `class_balanced` option (always False) is not implemented; its unused extra head (D + 1
heads for D domains) is left out.

Any backbone: the heads act on the pooled features. Under multi-process training every risk is the global
batch's, and every gradient, Hessian-vector product and head step is the global one (local contributions
summed over processes), so alpha and the penalty are the same on every process.
"""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.base import (
    Algorithm,
    at_least_fp32,
    concat_batches,
    cross_entropy,
    domain_risk,
    split_sizes,
)
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, as_int, fixed, log_uniform
from dgmoe.sharding import all_reduce_sum

HEAD_STEPS, HEAD_LR, NEUMANN_TERMS, NEUMANN_BOUND = 30, 0.1, 10, 10.0


def risk_share(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """This process's share of the domain's mean cross-entropy (the shares of all processes sum to it)."""
    if batch.shard is None:
        return cross_entropy(logits, batch.y)
    return F.cross_entropy(at_least_fp32(logits), batch.y, reduction="sum") / batch.shard.size


def global_grad(share: torch.Tensor, weight: torch.Tensor, batch: Batch, create_graph: bool = False) -> torch.Tensor:
    """Gradient of the global quantity whose local share is `share`, flattened (differentiable if asked; the
    graph is kept either way)."""
    (g,) = torch.autograd.grad(share, weight, create_graph=create_graph, retain_graph=True)
    return all_reduce_sum(g.reshape(-1), batch.shard)


def neumann_inverse_hvp(v: torch.Tensor, hvp, terms: int = NEUMANN_TERMS, bound: float = NEUMANN_BOUND,
                        aliasing: bool = True) -> torch.Tensor:
    """H^-1 v ~ sum_k (I - H)^k v, stopped after the first partial sum with an entry above `bound`.
    `aliasing`: DomainBed's form, where the first iterate replaces the k = 0 term."""
    h, current = v.clone(), v
    for k in range(terms):
        current = current - hvp(current)
        h = current + current if (aliasing and k == 0) else h + current
        if float(h.abs().max()) > bound:
            break
    return h


@register_algorithm
class TRM(Algorithm):
    DESCRIPTION = "Transfer risk minimisation: per-domain heads must transfer to the other domains"
    REFERENCE = "Xu & Jaakkola, Learning Representations that Support Robust Transfer of Predictors, arXiv:2110.09940"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "cos_lambda": HParam(1e-4, log_uniform(-5, 0)),
        "iters": HParam(200, as_int(log_uniform(0, 4))),
        "groupdro_eta": HParam(1e-2, log_uniform(-3, -1)),
        "trm_variant": HParam("domainbed", fixed("domainbed")),
    }

    # buffers, registered in __init__
    alpha: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        if self.hparams["trm_variant"] not in ("domainbed", "paper"):
            raise ValueError(f"trm_variant must be 'domainbed' or 'paper', got {self.hparams['trm_variant']!r}")
        self.domain_heads = nn.ModuleList(nn.Linear(network.num_features, num_classes) for _ in range(num_domains))
        self.head_optimizer = torch.optim.SGD(self.domain_heads.parameters(), lr=HEAD_LR)
        self.register_buffer("alpha", torch.ones(num_domains, num_domains) - torch.eye(num_domains))
        self.count_updates()

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "domain_heads": self.head_optimizer}

    def fit_heads(self, features: list[torch.Tensor], minibatches: list[Batch]) -> None:
        """30 SGD steps of every head on its own domain's (detached) features."""
        for _ in range(HEAD_STEPS):
            loss = cast(torch.Tensor, sum(cross_entropy(head(z), b.y)
                                          for head, z, b in zip(self.domain_heads, features, minibatches)))
            self.step(loss, self.head_optimizer)

    def transfer_penalty(self, q: int, features: list[torch.Tensor], minibatches: list[Batch]) -> torch.Tensor:
        head, bq = self.domain_heads[q], minibatches[q]
        aliasing = self.hparams["trm_variant"] == "domainbed"
        others = [i for i in range(len(minibatches)) if i != q]
        grad_q = global_grad(risk_share(head(features[q]), bq), head.weight, bq, create_graph=True)
        before = self.alpha[q].clone()
        logits = {i: head(features[i]) for i in others}
        risks = {i: domain_risk(logits[i], minibatches[i]) for i in others}
        shares = cast(torch.Tensor, sum(before[i] * risk_share(logits[i], minibatches[i]) for i in others))
        grad_p = global_grad(shares, head.weight, minibatches[others[0]]).detach()
        fixed_z = features[q].detach()

        def hvp(v: torch.Tensor) -> torch.Tensor:
            """H v for the Hessian of R_Q in w_Q's weight (local Hessians summed over processes)."""
            (first,) = torch.autograd.grad(risk_share(head(fixed_z), bq), head.weight, create_graph=True)
            (local,) = torch.autograd.grad(first.reshape(-1) @ v, head.weight)
            return all_reduce_sum(local.reshape(-1), bq.shard)

        transferred = neumann_inverse_hvp(grad_p, hvp, aliasing=aliasing)
        with torch.no_grad():
            for i in others:
                self.alpha[q, i] *= torch.exp(self.hparams["groupdro_eta"] * before[i] * risks[i])
        weights = self.alpha[q].clone() if aliasing else before
        weighted = sum(weights[i] * risks[i] + ((before[i] - weights[i]) * risks[i]).detach() for i in others)
        return weighted - self.hparams["cos_lambda"] * (transferred @ grad_q)

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        self.zero_grad(set_to_none=True)  # the head steps' synchronisation must see their gradients only
        batch = concat_batches(minibatches)
        z = self.features(batch)
        task = cross_entropy(self.classifier()(z), batch.y)
        penalty = torch.zeros((), device=task.device, dtype=task.dtype)
        if int(self.update_count) >= self.hparams["iters"]:
            self.alpha /= self.alpha.sum(1, keepdim=True)
            features = list(at_least_fp32(z).split(split_sizes(minibatches)))
            self.fit_heads([f.detach() for f in features], minibatches)
            penalty = cast(torch.Tensor, sum(self.transfer_penalty(q, features, minibatches)
                                             for q in range(len(minibatches))))
            penalty = penalty / len(minibatches)
        aux = self.moe_aux_loss()
        loss = task + penalty + aux
        self.step(loss)
        self.zero_grad(set_to_none=True)
        self.update_count += 1
        return {"loss": loss.item(), "nll": task.item(), "trm_loss": float(penalty.detach()), "loss_aux": aux.item()}
