"""Information-bottleneck penalties IB-ERM and IB-IRM (Ahuja et al., NeurIPS 2021, the IB-ERM / IB-IRM
objectives of Sec. 4), as in DomainBed.

The information bottleneck term, the entropy of the representation, is estimated as the paper's
experiments (and DomainBed) do by the variance of the pooled features: h_e = mean_k Var_i(z_ik) over domain
e's samples (unbiased, ddof 1), averaged over the training domains. IB-ERM minimises
mean_e R_e + w_ib * mean_e h_e; IB-IRM adds IRMv1's penalty (`dgmoe.algorithms.irm.irm_penalty`):
mean_e R_e + w_irm * mean_e P_e + w_ib * mean_e h_e. Warm-ups as DomainBed: w_ib = 0 (w_irm = 1) for the
first `ib_penalty_anneal_iters` (`irm_penalty_anneal_iters`) updates, then `ib_lambda` (`irm_lambda`); Adam
is reset when either switch happens. One forward over the concatenated domains, as DomainBed; the
variances, risks and IRM gradients are the whole minibatch's under multi-process training.
"""
from __future__ import annotations

import torch

from dgmoe.algorithms.base import (
    Algorithm,
    at_least_fp32,
    concat_batches,
    domain_risk,
    penalty_weight,
    split_sizes,
)
from dgmoe.algorithms.irm import irm_penalty
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, as_int, log_uniform
from dgmoe.sharding import Shard, global_mean


def feature_variance(z: torch.Tensor, shard: Shard | None = None) -> torch.Tensor:
    """mean_k of the unbiased variance over samples of feature k (with a shard: over the whole minibatch)."""
    z = at_least_fp32(z)
    if shard is None:
        return z.var(dim=0).mean()
    n = shard.size
    return (global_mean((z - global_mean(z, shard)).pow(2), shard) * (n / (n - 1))).mean()


IB_HPARAMS = {
    "ib_lambda": HParam(1e2, log_uniform(-1, 5)),
    "ib_penalty_anneal_iters": HParam(500, as_int(log_uniform(0, 4))),
}


class InformationBottleneck(Algorithm):
    """ERM (or IRM, `USE_IRM`) plus the feature-variance penalty."""

    USE_IRM = False

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.count_updates()

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        hp, count = self.hparams, int(self.update_count)
        ib_weight = penalty_weight(count, hp["ib_penalty_anneal_iters"], hp["ib_lambda"], 0.0)
        features = self.features(concat_batches(minibatches))
        logits = self.classifier()(features)
        sizes = split_sizes(minibatches)
        pairs = list(zip(features.split(sizes), logits.split(sizes), minibatches))
        nll = torch.stack([domain_risk(lg, b) for _, lg, b in pairs]).mean()
        ib = torch.stack([feature_variance(z, b.shard) for z, _, b in pairs]).mean()
        loss = nll + ib_weight * ib
        out = {"nll": nll.item(), "IB_penalty": ib.item()}
        resets = {hp["ib_penalty_anneal_iters"]}
        if self.USE_IRM:
            irm_weight = penalty_weight(count, hp["irm_penalty_anneal_iters"], hp["irm_lambda"], 1.0)
            irm = torch.stack([irm_penalty(lg, b.y, shard=b.shard) for _, lg, b in pairs]).mean()
            loss = loss + irm_weight * irm
            out["IRM_penalty"] = irm.item()
            resets.add(hp["irm_penalty_anneal_iters"])
        aux = self.moe_aux_loss()
        loss = loss + aux
        if count in resets:
            self.reset_optimizer_state(self.optimizer)
        self.step(loss)
        self.update_count += 1
        return {"loss": loss.item(), **out, "loss_aux": aux.item()}


@register_algorithm
class IB_ERM(InformationBottleneck):
    DESCRIPTION = "Information-bottleneck ERM: penalise the variance of each domain's features"
    REFERENCE = ("Ahuja et al., Invariance Principle Meets Information Bottleneck for Out-of-Distribution "
                 "Generalization, NeurIPS 2021")
    HPARAMS = dict(IB_HPARAMS)


@register_algorithm
class IB_IRM(InformationBottleneck):
    DESCRIPTION = "Information-bottleneck IRM: IRMv1's penalty plus the variance of each domain's features"
    REFERENCE = IB_ERM.REFERENCE
    MIN_TRAIN_DOMAINS = 2
    USE_IRM = True
    HPARAMS = {
        "irm_lambda": HParam(1e2, log_uniform(-1, 5)),
        "irm_penalty_anneal_iters": HParam(500, as_int(log_uniform(0, 4))),
        **IB_HPARAMS,
    }
