"""Causality-inspired invariant representation learning, CausIRL (Chevalley et al., arXiv:2206.11646,
2022), with an MMD or a CORAL distance, as in DomainBed.

Each training domain's minibatch is cut at a uniformly random position s_e in [0, n_e) (numpy's global
generator, as DomainBed); the first parts of all domains are pooled into one sample, the second parts into
another, and the penalty is the distance between the two pooled feature distributions: the
multi-bandwidth Gaussian-kernel MMD^2 of `dgmoe.algorithms.mmd` (CausIRL_MMD, with its
`kernel_self_distance`) or the mean-and-covariance
distance of `dgmoe.algorithms.coral` (CausIRL_CORAL, DomainBed's form). The penalty is 0 when either pooled
sample has fewer than 2 rows, and NaN or infinite values are replaced as `torch.nan_to_num` (DomainBed).
Objective: mean_e CE_e + mmd_gamma * penalty. Features are computed per domain for BatchNorm backbones (as
DomainBed); under multi-process training the cut and the penalty are the whole minibatches'.
"""
from __future__ import annotations

import numpy as np
import torch

from dgmoe.algorithms.base import Algorithm, at_least_fp32, cross_entropy
from dgmoe.algorithms.coral import coral_penalty
from dgmoe.algorithms.mmd import SELF_DISTANCE, mmd_penalty, self_distance_of
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform
from dgmoe.sharding import gather_samples


def random_cut(features: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(first parts, second parts) of the domains' features, each domain cut at np.random.randint(0, n_e)."""
    firsts, seconds = [], []
    for z in features:
        cut = int(np.random.randint(0, len(z)))
        firsts.append(z[:cut])
        seconds.append(z[cut:])
    return torch.cat(firsts), torch.cat(seconds)


class AbstractCausIRL(Algorithm):
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {"mmd_gamma": HParam(1.0, log_uniform(-1, 1))}

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        features = self.domain_features(minibatches)
        classifier = self.classifier()
        task = torch.stack([cross_entropy(classifier(z), b.y) for z, b in zip(features, minibatches)]).mean()
        first, second = random_cut([at_least_fp32(gather_samples(z, b.shard)) for z, b in zip(features, minibatches)])
        if len(first) > 1 and len(second) > 1:
            penalty = torch.nan_to_num(self.distance(first, second))
        else:
            penalty = task.new_zeros(())
        aux = self.moe_aux_loss()
        loss = task + self.hparams["mmd_gamma"] * penalty + aux
        self.step(loss)
        return {"loss": loss.item(), "loss_task": task.item(), "penalty": penalty.item(), "loss_aux": aux.item()}


@register_algorithm
class CausIRL_MMD(AbstractCausIRL):
    DESCRIPTION = "CausIRL: match the feature distributions of two random mixtures of the domains (Gaussian-kernel MMD)"
    REFERENCE = "Chevalley et al., Invariant Causal Mechanisms through Distribution Matching, arXiv:2206.11646, 2022"
    HPARAMS = {**AbstractCausIRL.HPARAMS, "kernel_self_distance": SELF_DISTANCE}

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.self_distance = self_distance_of(self.hparams)

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return mmd_penalty(a, b, self_distance=self.self_distance)


@register_algorithm
class CausIRL_CORAL(AbstractCausIRL):
    DESCRIPTION = "CausIRL: match the feature means and covariances of two random mixtures of the domains"
    REFERENCE = CausIRL_MMD.REFERENCE

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return coral_penalty(a, b, "domainbed")
