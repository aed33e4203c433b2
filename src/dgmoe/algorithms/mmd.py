"""Feature-distribution matching with MMD (Li et al., CVPR 2018, MMD-AAE's MMD term), as in DomainBed.

The penalty is the biased squared MMD between every pair of training domains' pooled features with a sum
of Gaussian kernels k(a, b) = sum_g exp(-g ||a - b||^2), averaged over the pairs, weighted by `mmd_gamma`.
Squared distances are DomainBed's expansion by default (`kernel_self_distance`, below).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, cast

import torch

from dgmoe.algorithms.base import Algorithm, at_least_fp32, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, fixed, log_uniform, non_negative
from dgmoe.sharding import gather_samples

KERNEL_GAMMAS = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
#: `kernel_self_distance`, how the kernels compute a squared distance: 'domainbed' (default) as DomainBed's
#: `my_cdist`, ||a||^2 - 2 a.b + ||b||^2 (one addmm), whose value for a sample and itself (the diagonal of a
#: set with itself, or equal scalars) is float rounding noise instead of 0; 'zero' (dgmoe's variant) makes
#: those distances exactly 0: the diagonal of a set with itself is set to 0 and scalars (RDM's losses) use
#: the plain difference. Through exp(-1000 d) that noise can decide a float32 update (docs/design.md).
SELF_DISTANCES = ("domainbed", "zero")
SELF_DISTANCE = HParam("domainbed", fixed("domainbed"))


def self_distance_of(hparams: Mapping[str, Any]) -> str:
    """The run's `kernel_self_distance`, checked."""
    value = hparams["kernel_self_distance"]
    if value not in SELF_DISTANCES:
        raise ValueError(f"kernel_self_distance must be one of {list(SELF_DISTANCES)}, got {value!r}")
    return str(value)


def squared_distances(a: torch.Tensor, b: torch.Tensor, self_distance: str = "domainbed") -> torch.Tensor:
    """||a_i - b_j||^2, clamped at a tiny positive value as DomainBed's `my_cdist`; `self_distance` as
    `kernel_self_distance` above."""
    if self_distance == "domainbed":
        a_norm, b_norm = a.pow(2).sum(-1, keepdim=True), b.pow(2).sum(-1, keepdim=True)
        return torch.addmm(b_norm.t(), a, b.t(), alpha=-2).add(a_norm).clamp_min(1e-30)
    if a.shape[-1] == 1:  # scalars (RDM's losses): the plain difference is exact where values coincide
        return (a - b.t()).pow(2).clamp_min(1e-30)
    d = a.pow(2).sum(-1, keepdim=True) - 2 * a @ b.t() + b.pow(2).sum(-1).unsqueeze(0)
    if a is b:
        d = d.masked_fill(torch.eye(len(a), dtype=torch.bool, device=d.device), 0.0)
    return d.clamp_min(1e-30)


def gaussian_kernel(a: torch.Tensor, b: torch.Tensor, gammas: Sequence[float] = KERNEL_GAMMAS,
                    self_distance: str = "domainbed") -> torch.Tensor:
    d = squared_distances(a, b, self_distance)
    return cast(torch.Tensor, sum(torch.exp(-g * d) for g in gammas))  # gammas is not empty


def mmd_penalty(a: torch.Tensor, b: torch.Tensor, gammas: Sequence[float] = KERNEL_GAMMAS,
                self_distance: str = "domainbed") -> torch.Tensor:
    """Biased MMD^2 = E k(a, a') + E k(b, b') - 2 E k(a, b)."""
    a, b = at_least_fp32(a), at_least_fp32(b)
    return (gaussian_kernel(a, a, gammas, self_distance).mean() + gaussian_kernel(b, b, gammas, self_distance).mean()
            - 2 * gaussian_kernel(a, b, gammas, self_distance).mean())


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
    HPARAMS = {**FeatureMatching.HPARAMS, "kernel_self_distance": SELF_DISTANCE}

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.self_distance = self_distance_of(self.hparams)

    def penalty(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return mmd_penalty(a, b, self_distance=self.self_distance)
