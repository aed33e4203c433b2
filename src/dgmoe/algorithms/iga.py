"""Inter-environmental gradient alignment, IGA (Koyama & Yamaguchi, arXiv:2008.01883v2), as in DomainBed.

With g_e the gradient of domain e's risk with respect to all trainable weights, the objective is
mean_e R_e + penalty * sum_e ||g_e - mean_e' g_e'||^2: the trace of the covariance of the domains' gradients
(times the number of domains), the paper's IGA regulariser. The penalty is differentiated through the
g_e (a second-order term); DomainBed computes the mean gradient separately and without a graph, which gives
the same value and the same gradient, since the deviations from the mean sum to zero.

Per-domain forwards for BatchNorm backbones, as DomainBed. Under multi-process training each g_e is the
whole minibatch's: the local gradients are summed over processes with a differentiable all-reduce before
the penalty. The forward runs with PyTorch's math attention kernel and the MoE layers' plain-autograd
expert path (`twice_differentiable`), because the fused kernels have no second derivative.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from dgmoe.algorithms.base import Algorithm, at_least_fp32, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform
from dgmoe.moe.dispatch import twice_differentiable
from dgmoe.sharding import all_reduce_sum


def flat_gradient(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """d loss / d params, flattened, with a graph (zeros for weights the loss does not reach)."""
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params)])


def gradient_variance_penalty(grads: torch.Tensor) -> torch.Tensor:
    """sum_e ||g_e - mean_e' g_e'||^2 for grads [num_domains, P], with the mean as a constant."""
    return (grads - grads.mean(0).detach()).pow(2).sum()


def domain_loss_share(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """This process's share of the domain's mean loss: the mean itself in one process, the local sum over
    the global minibatch size under multi-process training (the shares sum to the global mean)."""
    if batch.shard is None:
        return cross_entropy(logits, batch.y)
    return F.cross_entropy(at_least_fp32(logits), batch.y, reduction="sum") / batch.shard.size


@register_algorithm
class IGA(Algorithm):
    DESCRIPTION = "Inter-environmental gradient alignment: penalise the variance of the domains' risk gradients"
    REFERENCE = ("Koyama & Yamaguchi, When is invariance useful in an Out-of-Distribution Generalization problem?, "
                 "arXiv:2008.01883, 2020")
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {"penalty": HParam(1000.0, log_uniform(1, 5))}

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        params = [p for p in self.network.parameters() if p.requires_grad]
        with sdpa_kernel([SDPBackend.MATH]), twice_differentiable():
            features = self.domain_features(minibatches)
        classifier = self.classifier()
        logits = [classifier(z) for z in features]
        mean_loss = torch.stack([cross_entropy(lg, b.y) for lg, b in zip(logits, minibatches)]).mean()
        grads = torch.stack([flat_gradient(domain_loss_share(lg, b), params) for lg, b in zip(logits, minibatches)])
        grads = all_reduce_sum(grads, minibatches[0].shard)
        penalty = gradient_variance_penalty(grads)
        aux = self.moe_aux_loss()
        loss = mean_loss + self.hparams["penalty"] * penalty + aux
        self.step(loss)
        return {"loss": loss.item(), "loss_task": mean_loss.item(), "penalty": penalty.item(), "loss_aux": aux.item()}
