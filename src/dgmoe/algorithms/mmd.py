"""Feature-distribution matching with MMD (Li et al., CVPR 2018, MMD-AAE's MMD term), as in DomainBed.

The penalty is the biased squared MMD between every pair of training domains' pooled features with a sum
of Gaussian kernels k(a, b) = sum_g exp(-g ||a - b||^2), averaged over the pairs, weighted by `mmd_gamma`.
"""
from __future__ import annotations

from typing import Callable, Sequence, cast

import torch

from dgmoe.algorithms.base import Algorithm, at_least_fp32, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform, non_negative
from dgmoe.sharding import gather_samples

KERNEL_GAMMAS = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)


def squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """||a_i - b_j||^2, clamped at a tiny positive value as DomainBed's `my_cdist`. For a set with itself
    the diagonal is exactly 0 (DomainBed's expansion leaves rounding noise there, which the kernel's
    exp(-1000 d) turns into gradient noise that decides the update at float32 precision)."""
    if a.shape[-1] == 1:  # scalars (RDM's losses): the plain difference is exact where values coincide
        return (a - b.t()).pow(2).clamp_min(1e-30)
    d = a.pow(2).sum(-1, keepdim=True) - 2 * a @ b.t() + b.pow(2).sum(-1).unsqueeze(0)
    if a is b:
        d = d.masked_fill(torch.eye(len(a), dtype=torch.bool, device=d.device), 0.0)
    return d.clamp_min(1e-30)


def gaussian_kernel(a: torch.Tensor, b: torch.Tensor, gammas: Sequence[float] = KERNEL_GAMMAS) -> torch.Tensor:
    d = squared_distances(a, b)
    return cast(torch.Tensor, sum(torch.exp(-g * d) for g in gammas))  # gammas is not empty


def mmd_penalty(a: torch.Tensor, b: torch.Tensor, gammas: Sequence[float] = KERNEL_GAMMAS) -> torch.Tensor:
    """Biased MMD^2 = E k(a, a') + E k(b, b') - 2 E k(a, b)."""
    a, b = at_least_fp32(a), at_least_fp32(b)
    return (gaussian_kernel(a, a, gammas).mean() + gaussian_kernel(b, b, gammas).mean()
            - 2 * gaussian_kernel(a, b, gammas).mean())


def pairwise_penalty(features: list[torch.Tensor],
                     fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Mean of fn over all unordered pairs of domains."""
    terms = [fn(features[i], features[j]) for i in range(len(features)) for j in range(i + 1, len(features))]
    return torch.stack(terms).mean()


class FeatureMatching(Algorithm):
    """ERM plus `mmd_gamma` times a pairwise penalty on the domains' pooled features."""

    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {"mmd_gamma": HParam(1.0, log_uniform(-1, 1), non_negative)}

    def penalty(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        features = self.domain_features(minibatches)
        classifier = self.classifier()
        task = torch.stack([cross_entropy(classifier(z), b.y) for z, b in zip(features, minibatches)]).mean()
        # under multi-process training, the penalty compares the domains' whole minibatches
        penalty = pairwise_penalty([gather_samples(z, b.shard) for z, b in zip(features, minibatches)], self.penalty)
        aux = self.moe_aux_loss()
        loss = task + self.hparams["mmd_gamma"] * penalty + aux
        self.step(loss)
        return {"loss": loss.item(), "loss_task": task.item(), "penalty": penalty.item(), "loss_aux": aux.item()}


@register_algorithm
class MMD(FeatureMatching):
    DESCRIPTION = "Match the training domains' feature distributions with a multi-bandwidth Gaussian-kernel MMD"
    REFERENCE = "Li et al., Domain Generalization with Adversarial Feature Learning (MMD-AAE), CVPR 2018"

    def penalty(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return mmd_penalty(a, b)
