"""Transfer (Zhang et al., NeurIPS 2021, Algorithm 1), as DomainBed's `Transfer.update`.

Transferability between the training domains is measured with an adversarial copy h' of the classifier h
kept within a Euclidean ball of radius `delta` around it: gap(h') = max_i R_i(h' o f) - min_j R_j(h' o f)
over the training domains' risks. Each update
1. trains backbone f and classifier h on the pooled cross-entropy (Adam);
2. trains f (the same Adam) on `t_lambda` * gap(h'), h' as left by the previous update;
3. resets h' <- h, then takes `d_steps_per_g` SGD ascent steps (learning rate `lr_d`) on `t_lambda` *
   gap(h'), each followed by the projection of h' onto the ball B(h, delta) (h' <- h + delta (h' - h) /
   ||h' - h|| when outside; the norm over all of h's parameters).

Forwards follow DomainBed: step 1 on the concatenated batch, the gaps domain by domain (one forward per
domain). The adversary's steps do not update f, so their forwards run without a graph (DomainBed back-
propagates into f there and discards those gradients). The MoE auxiliary loss is added to steps 1 and 2.

`gda`: DomainBed's default False is the algorithm above. Its random search draws gda=True, for which
DomainBed's code puts only h''s parameters in the main optimiser, so that f and h are never updated (the
copy h' <- h then undoes its steps). dgmoe reads gda=True as the flag's evident intent, gradient
descent-ascent with plain SGD: f and h are trained by SGD (`lr`, no weight decay, as DomainBed's SGD) instead
of Adam; everything else is the same. `weight_decay_d` and `beta1` are drawn as in DomainBed's registry
and, as there, unused. DomainBed's alternative `update_second` (not used by its `train.py`) is not
implemented.

Any backbone: h is the backbone's classifier, h' a copy. Under multi-process training the domain risks are
the global batch's, so the gap, the max/min choice and the projection are the same on every process.
"""
from __future__ import annotations

import copy

import torch

from dgmoe.algorithms.base import Algorithm, concat_batches, cross_entropy, domain_risk, trainable
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, choice, fixed, log_uniform, uniform
from dgmoe.moe.auxiliary import clear_aux


def loss_gap(risks: list[torch.Tensor]) -> torch.Tensor:
    """max_i R_i - min_j R_j (the first of equal risks, as DomainBed's strict comparisons)."""
    values = [float(r.detach()) for r in risks]
    return risks[values.index(max(values))] - risks[values.index(min(values))]


@torch.no_grad()
def project_to_ball(adversary: torch.nn.Module, center: torch.nn.Module, delta: float) -> float:
    """Project `adversary`'s parameters onto the Euclidean ball of radius delta around `center`'s (over the
    state dict, as DomainBed's `proj`); returns the distance before projecting."""
    dist = torch.sqrt(sum(((a - c) ** 2).sum() for a, c in zip(adversary.state_dict().values(),
                                                             center.state_dict().values())))
    if float(dist) > delta:
        ratio = delta / dist
        for a, c in zip(adversary.parameters(), center.parameters()):
            a.copy_(c + ratio * (a - c))
    return float(dist)


@register_algorithm
class Transfer(Algorithm):
    DESCRIPTION = "Transfer: train against an adversarial nearby classifier that maximises the gap between domain risks"
    REFERENCE = "Zhang et al., Quantifying and Improving Transferability in Domain Generalization, NeurIPS 2021"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "t_lambda": HParam(1.0, log_uniform(-2, 1)),
        "delta": HParam(2.0, uniform(0.1, 3.0)),
        "d_steps_per_g": HParam(10, choice([1, 2, 5])),
        "weight_decay_d": HParam(0.0, log_uniform(-6, -2)),
        "gda": HParam(False, fixed(True)),
        "beta1": HParam(0.5, choice([0.0, 0.5])),
        "lr_d": HParam(1e-3, log_uniform(-4.5, -2.5)),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        if self.hparams["gda"]:
            self.optimizer = torch.optim.SGD(trainable(self.network.parameters()), lr=self.hparams["lr"])
        self.adv_classifier = copy.deepcopy(self.classifier())
        self.adv_optimizer = torch.optim.SGD(self.adv_classifier.parameters(), lr=self.hparams["lr_d"])

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "adversary": self.adv_optimizer}

    def gap(self, features: list[torch.Tensor], minibatches: list[Batch]) -> torch.Tensor:
        return self.hparams["t_lambda"] * loss_gap([domain_risk(self.adv_classifier(z), b)
                                                    for z, b in zip(features, minibatches)])

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        batch = concat_batches(minibatches)
        task = cross_entropy(self.logits(batch), batch.y)
        aux_task = self.moe_aux_loss()
        self.step(task + aux_task)
        clear_aux(self.network)
        self.zero_grad(set_to_none=True)
        gap = self.gap(self.domain_features(minibatches), minibatches)
        aux_gap = self.moe_aux_loss()
        self.step(gap + aux_gap)
        clear_aux(self.network)
        self.zero_grad(set_to_none=True)
        self.adv_classifier.load_state_dict(self.classifier().state_dict())
        adv_gap = gap
        for _ in range(self.hparams["d_steps_per_g"]):
            with torch.no_grad():
                features = self.domain_features(minibatches)
            adv_gap = -self.gap(features, minibatches)
            self.step(adv_gap, self.adv_optimizer)
            project_to_ball(self.adv_classifier, self.classifier(), self.hparams["delta"])
        self.zero_grad(set_to_none=True)
        return {"loss": task.item(), "gap": -adv_gap.item(), "loss_aux": (aux_task.item() + aux_gap.item()) / 2}
