"""Variance risk extrapolation, V-REx (Krueger et al., ICML 2021, eq. 8).

Objective: mean_e R_e + beta * Var_e(R_e), with the population variance over training domains and
DomainBed's warm-up (beta = 1 for the first `vrex_penalty_anneal_iters` updates, Adam reset at the switch).
"""
from __future__ import annotations

import torch

from dgmoe.algorithms.base import Algorithm, concat_batches, penalty_weight, per_domain_risks
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, as_int, log_uniform, non_negative


def vrex_penalty(risks: torch.Tensor) -> torch.Tensor:
    """Population variance (ddof 0) of the per-domain risks."""
    return (risks - risks.mean()).pow(2).mean()


@register_algorithm
class VREx(Algorithm):
    DESCRIPTION = "Variance risk extrapolation: penalise the variance of the training domains' risks"
    REFERENCE = "Krueger et al., Out-of-Distribution Generalization via Risk Extrapolation (REx), ICML 2021"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "vrex_lambda": HParam(1e1, log_uniform(-1, 5), non_negative),
        "vrex_penalty_anneal_iters": HParam(500, as_int(log_uniform(0, 4)), non_negative),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.count_updates()

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        count = int(self.update_count)
        anneal = self.hparams["vrex_penalty_anneal_iters"]
        weight = penalty_weight(count, anneal, self.hparams["vrex_lambda"], 1.0)
        batch = concat_batches(minibatches)
        risks = per_domain_risks(self.logits(batch), minibatches)
        mean, penalty = risks.mean(), vrex_penalty(risks)
        aux = self.moe_aux_loss()
        if count == anneal:
            self.reset_optimizer_state(self.optimizer)
        loss = mean + weight * penalty + aux
        self.step(loss)
        self.update_count += 1
        return {"loss": loss.item(), "nll": mean.item(), "penalty": penalty.item(), "loss_aux": aux.item()}
