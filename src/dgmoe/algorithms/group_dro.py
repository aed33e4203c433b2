"""Group distributionally robust optimisation (Sagawa et al., ICLR 2020, Algorithm 1).

Domain weights q follow exponentiated-gradient ascent on the domain risks, q_e <- q_e exp(eta R_e), then
normalised; the model minimises sum_e q_e R_e. q is a buffer, so it is saved and resumed with the run.
"""
from __future__ import annotations

import torch

from dgmoe.algorithms.base import Algorithm, domain_risk
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform, non_negative


def group_dro_weights(q: torch.Tensor, risks: torch.Tensor, eta: float) -> torch.Tensor:
    """One exponentiated-gradient step on the simplex: q * exp(eta * risks), normalised."""
    q = q * torch.exp(eta * risks.detach())
    return q / q.sum()


@register_algorithm
class GroupDRO(Algorithm):
    DESCRIPTION = "Group DRO: minimise a worst-case mixture of domain risks with online domain weights"
    REFERENCE = "Sagawa et al., Distributionally Robust Neural Networks for Group Shifts, ICLR 2020"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {"groupdro_eta": HParam(1e-2, log_uniform(-3, -1), non_negative)}

    # buffers, registered in __init__
    q: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.register_buffer("q", torch.full((num_domains,), 1.0 / num_domains))

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        classifier = self.classifier()
        features = self.domain_features(minibatches)
        risks = torch.stack([domain_risk(classifier(z), b) for z, b in zip(features, minibatches)])
        self.q.copy_(group_dro_weights(self.q, risks, self.hparams["groupdro_eta"]))
        task = torch.dot(risks, self.q)
        aux = self.moe_aux_loss()
        self.step(task + aux)
        return {"loss": (task + aux).item(), "loss_task": task.item(), "loss_aux": aux.item()}
