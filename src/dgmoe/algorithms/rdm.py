"""Risk distribution matching, RDM (Nguyen et al., WACV 2024), as in its DomainBed implementation.

With l the per-sample losses of all training domains and l_w those of the domain with the largest mean
risk, the objective is mean_e R_e + lambda MMD^2(l_w, l) + v (Var(l) + Var(l_w)) with a Gaussian-kernel
MMD on the scalar losses (gammas 1e-4 ... 1e3; squared distances as `kernel_self_distance` of
`dgmoe.algorithms.mmd`, DomainBed's expansion by default) and unbiased variances. Both penalties start after
`rdm_penalty_anneal_iters` updates, when Adam is reset with learning rate `rdm_lr`.
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches, split_sizes
from dgmoe.algorithms.mmd import SELF_DISTANCE, mmd_penalty, self_distance_of
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import DatasetHParams, HParam, as_int, positive, uniform
from dgmoe.sharding import gather_samples

RDM_GAMMAS = (0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)


def rdm_penalties(losses: torch.Tensor, sizes: list[int],
                  self_distance: str = "domainbed") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(per-domain risks, matching penalty, variance penalty) from per-sample losses; `self_distance` is
    `dgmoe.algorithms.mmd`'s `kernel_self_distance`."""
    per_domain = losses.split(sizes)
    risks = torch.stack([l.mean() for l in per_domain])
    worst = per_domain[int(risks.detach().argmax())]
    matching = mmd_penalty(worst.unsqueeze(1), losses.unsqueeze(1), RDM_GAMMAS, self_distance)
    variance = losses.var() + worst.var()
    return risks, matching, variance


@register_algorithm
class RDM(Algorithm):
    DESCRIPTION = "Risk distribution matching: match the worst domain's loss distribution to the pooled one"
    REFERENCE = "Nguyen et al., Domain Generalisation via Risk Distribution Matching, WACV 2024"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "rdm_lambda": HParam(5.0, uniform(0.1, 10.0)),
        "rdm_penalty_anneal_iters": HParam(1500, as_int(uniform(800, 2700))),
        "variance_weight": HParam(0.004, uniform(0.001, 0.007)),
        "rdm_lr": HParam(1.5e-5, uniform(8e-6, 2e-5), positive),
        "kernel_self_distance": SELF_DISTANCE,
    }

    OVERRIDES = ("batch_size",)

    @classmethod
    def hparam_specs(cls, dataset: DatasetHParams, shared: Mapping[str, HParam]) -> dict[str, HParam]:
        """DomainBed's own batch size on the image-folder datasets; its per-dataset entries (DomainNet,
        TerraIncognita, PACS, OfficeHome) are in those datasets' catalogue entries (`RDM_LARGE` and others)."""
        specs = dict(cls.HPARAMS)
        if not dataset.small_images:
            specs["batch_size"] = HParam(88, as_int(uniform(70, 100)), positive)
        return specs

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.self_distance = self_distance_of(self.hparams)
        self.count_updates()

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        count = int(self.update_count)
        anneal = self.hparams["rdm_penalty_anneal_iters"]
        on = count >= anneal
        batch = concat_batches(minibatches)
        losses = F.cross_entropy(at_least_fp32(self.logits(batch)), batch.y, reduction="none")
        # the domains' whole minibatches (all processes' samples under multi-process training)
        per_domain = [gather_samples(l, b.shard) for l, b in zip(losses.split(split_sizes(minibatches)), minibatches)]
        risks, matching, variance = rdm_penalties(torch.cat(per_domain), [len(l) for l in per_domain],
                                                 self.self_distance)
        erm = risks.mean()
        aux = self.moe_aux_loss()
        loss = erm + aux
        if on:
            loss = loss + self.hparams["rdm_lambda"] * matching + self.hparams["variance_weight"] * variance
        if count == anneal:
            self.reset_optimizer_state(self.optimizer, lr=self.hparams["rdm_lr"])
        self.step(loss)
        self.update_count += 1
        return {"loss": loss.item(), "erm_loss": erm.item(), "matching_penalty": matching.item(),
                "variance_penalty": variance.item(), "loss_aux": aux.item()}
