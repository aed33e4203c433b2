"""Fishr: invariant gradient variances (Rame et al., ICML 2022, eqs. 4-6), without BackPACK.

Per-sample gradients of the loss with respect to the classifier's parameters come from `torch.func`
(`vmap(grad(...))` over `functional_call`), stay differentiable with respect to the features and the
classifier, and are reduced to each domain's gradient variance v_e (mean over the domain's samples of the
squared centred gradients). Each v_e is smoothed by an exponential moving average (eq. 6); the penalty is
mean_e mean_k (v_e - mean_e' v_e')_k^2, weighted by `lambda` after `penalty_anneal_iters` updates (0 before;
Adam is reset at the switch).

Moving average: the paper's is v <- gamma v_prev + (1 - gamma) v. The official code (DomainBed's Fishr, by
the paper's authors) divides that by (1 - gamma) ("oneminusema_correction"), which scales the penalty by up
to 1/(1 - gamma)^2 and is the scale the `lambda` range was tuned on; it is the default here
(`fishr_ema_correction=True`), False gives the paper's form.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches, cross_entropy, split_sizes
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, as_int, fixed, log_uniform, non_negative, probability, uniform
from dgmoe.sharding import Shard, global_mean


def per_sample_grads(classifier: nn.Module, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[B, P]: gradient of CE(classifier(z_i), y_i) w.r.t. the classifier's parameters, per sample,
    flattened in `named_parameters` order. Differentiable w.r.t. z and the parameters."""
    params: dict[str, torch.Tensor] = {k: v for k, v in classifier.named_parameters()}

    def loss(p: dict[str, torch.Tensor], zi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(classifier, p, (zi.unsqueeze(0),))
        return F.cross_entropy(at_least_fp32(logits), yi.unsqueeze(0))

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, z, y)
    return torch.cat([g.reshape(len(z), -1) for g in grads.values()], dim=1)


def domain_grad_variances(grads: torch.Tensor, sizes: list[int],
                          shards: list[Shard | None] | None = None) -> torch.Tensor:
    """[num_domains, P]: per-domain variance (ddof 0) of the per-sample gradients, over each domain's whole
    minibatch (with shards, all processes' samples: global mean, then global variance)."""
    out = []
    for g, shard in zip(grads.split(sizes), shards or [None] * len(sizes)):
        if shard is None:
            out.append((g - g.mean(0, keepdim=True)).pow(2).mean(0))
        else:
            out.append(global_mean((g - global_mean(g, shard)).pow(2), shard))
    return torch.stack(out)


def fishr_penalty(variances: torch.Tensor) -> torch.Tensor:
    """mean over domains of the mean squared distance of v_e to the mean variance (eq. 5)."""
    return (variances - variances.mean(0, keepdim=True)).pow(2).mean(1).mean()


def ema_update(previous: torch.Tensor, current: torch.Tensor, gamma: float, first: bool,
               correction: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(value used in the penalty, value to store). The stored value is detached; the first update
    starts from zeros as the official code."""
    prev = torch.zeros_like(current) if first else previous.detach()
    ema = gamma * prev + (1 - gamma) * current
    return (ema / (1 - gamma) if correction else ema), ema.detach()


@register_algorithm
class Fishr(Algorithm):
    DESCRIPTION = "Fishr: match the domains' variances of per-sample classifier gradients"
    REFERENCE = "Rame et al., Fishr: Invariant Gradient Variances for Out-of-Distribution Generalization, ICML 2022"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "lambda": HParam(1000.0, log_uniform(1.0, 4.0), non_negative),
        "penalty_anneal_iters": HParam(1500, as_int(uniform(0.0, 5000.0)), non_negative),
        "ema": HParam(0.95, uniform(0.90, 0.99), probability),
        "fishr_ema_correction": HParam(True, fixed(True)),
    }

    # buffers, registered in __init__
    ema_variances: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        n_params = sum(p.numel() for p in self.classifier().parameters())
        self.count_updates()
        self.register_buffer("ema_variances", torch.zeros(num_domains, n_params))

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        count = int(self.update_count)
        anneal = self.hparams["penalty_anneal_iters"]
        batch = concat_batches(minibatches)
        z = self.features(batch)
        classifier = self.classifier()
        logits = classifier(z)
        variances = domain_grad_variances(per_sample_grads(classifier, z, batch.y), split_sizes(minibatches),
                                          [b.shard for b in minibatches])
        smoothed, stored = ema_update(self.ema_variances, variances, self.hparams["ema"], count == 0,
                                      self.hparams["fishr_ema_correction"])
        self.ema_variances.copy_(stored)
        penalty = fishr_penalty(smoothed)
        task = cross_entropy(logits, batch.y)
        aux = self.moe_aux_loss()
        weight = self.hparams["lambda"] if count >= anneal else 0.0
        if count == anneal and anneal != 0:
            self.reset_optimizer_state(self.optimizer)
        loss = task + weight * penalty + aux
        self.step(loss)
        self.update_count += 1
        return {"loss": loss.item(), "nll": task.item(), "penalty": penalty.item(), "loss_aux": aux.item()}
