"""Empirical quantile risk minimisation, EQRM (Eastwood et al., NeurIPS 2022, Algorithm 1), as its
DomainBed implementation (by the paper's authors).

After `eqrm_burnin_iters` updates of ERM on the mean domain risk, the objective is the alpha-quantile
(`eqrm_quantile`) of the distribution of the training domains' risks, estimated with a Gaussian kernel
density on the per-domain risks R_1..R_E with the "Gauss-optimal" bandwidth h = 1.06 std(R) E^(-1/5)
(unbiased std). The quantile is found as the authors' code does: bisection (at most 32 halvings) of the
KDE's CDF between lo = min R + h z_alpha and hi = max R + h z_alpha, z_alpha the standard normal quantile.
Its value is a fixed convex combination of lo and hi, so the gradient flows through min R, max R and h
exactly as in that code. Adam is reset with learning rate `eqrm_lr` when the burn-in ends (at update ==
`eqrm_burnin_iters`; DomainBed's random search draws a non-integer float there, so in random runs the
switch and the new learning rate never happen, as in DomainBed). The quantile is computed in float64;
per-domain forwards for BatchNorm backbones, as DomainBed; risks are the whole minibatches' under
multi-process training.
"""
from __future__ import annotations

import math

import torch

from dgmoe.algorithms.base import Algorithm, domain_risk
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform, uniform


def normal_cdf(x: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf((x - loc) / (scale * math.sqrt(2))))


def kde_quantile(risks: torch.Tensor, alpha: float, max_halvings: int = 32) -> torch.Tensor:
    """alpha-quantile of the Gaussian KDE of `risks` (1-d), by bisection of its CDF (differentiable as a
    convex combination of the bracket's ends)."""
    data = risks.to(torch.float64).sort().values
    bandwidth = 1.06 * data.std() * len(data) ** -0.2
    q = torch.tensor(alpha, dtype=torch.float64, device=data.device)
    z = torch.erfinv(2 * q - 1) * math.sqrt(2)
    bracket = [data[0] + bandwidth * z, data[-1] + bandwidth * z]
    mid = 0.5 * (bracket[0] + bracket[1])
    for _ in range(max_halvings):
        with torch.no_grad():
            above = bool(normal_cdf(mid, data, bandwidth).mean() > q)
        bracket[int(above)] = mid
        following = 0.5 * (bracket[0] + bracket[1])
        if bool(following == mid):
            break
        mid = following
    return mid


@register_algorithm
class EQRM(Algorithm):
    DESCRIPTION = "Empirical quantile risk minimisation: minimise a high quantile of the domains' risk distribution"
    REFERENCE = "Eastwood et al., Probable Domain Generalization via Quantile Risk Minimization, NeurIPS 2022"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "eqrm_quantile": HParam(0.75, uniform(0.5, 0.99)),
        "eqrm_burnin_iters": HParam(2500, log_uniform(2.5, 3.5)),
        "eqrm_lr": HParam(1e-6, log_uniform(-7, -5)),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.count_updates()

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        count = int(self.update_count)
        burnin = self.hparams["eqrm_burnin_iters"]
        classifier = self.classifier()
        features = self.domain_features(minibatches)
        risks = torch.stack([domain_risk(classifier(z), b) for z, b in zip(features, minibatches)])
        if count < burnin:
            task = risks.mean()
        else:
            task = kde_quantile(risks, self.hparams["eqrm_quantile"])
        aux = self.moe_aux_loss()
        if count == burnin:
            self.reset_optimizer_state(self.optimizer, lr=self.hparams["eqrm_lr"])
        loss = task + aux
        self.step(loss)
        self.update_count += 1
        return {"loss": loss.item(), "loss_task": task.item(), "mean_risk": risks.mean().item(), "loss_aux": aux.item()}
