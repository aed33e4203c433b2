"""Gradient masking by agreement across domains: AND-mask (Parascandolo et al., ICLR 2021) and SAND-mask
(Shahtalebi et al., arXiv:2106.02266, 2021), as in DomainBed.

Each update takes the gradient g_e of every training domain's risk and, for each weight tensor, replaces
the mean gradient by m * mean_e g_e / (1e-10 + mean(m)) (the rescaling by the fraction of unmasked entries
is DomainBed's), where the mask m, entry by entry, with a = |mean_e sign(g_e)| the sign agreement, is
- AND-mask: m = 1[a >= tau];
- SAND-mask: m = max(0, tanh(k (a - tau) / Var_e(g_e))) (unbiased variance over domains; as DomainBed, a
  NaN variance counts as 1e-17 and a NaN mask entry, 0/0 where all domains agree exactly, as 1e-17).

Multi-process training: each g_e is averaged over processes (the engine's gradient synchronisation, once
per domain) before masking, so the mask is the whole batch's. The MoE auxiliary loss is not a domain's
risk: its gradient (synchronised likewise) is added to the masked gradient unmasked. A weight no domain's
loss reaches keeps no gradient. Per-domain forwards for BatchNorm backbones, as DomainBed.
"""
from __future__ import annotations

import torch

from dgmoe.algorithms.base import Algorithm, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform, uniform

NAN_FILL = 1e-17
#: entries of a domain's gradient at most this many machine epsilons times the largest entry of the weight
#: tensor's gradients count as exactly zero: rounding noise of gradients that are zero in exact arithmetic
#: (e.g. a ViT's attention key bias, a router's rows for unchosen experts)
ROUNDING_FLOOR_EPS = 64


def without_rounding_noise(grads: torch.Tensor) -> torch.Tensor:
    """`grads` [num_domains, ...] with the entries below the rounding floor set to 0, so that rounding
    (which differs with the process count or the summation order) cannot decide a sign or a mask."""
    floor = ROUNDING_FLOOR_EPS * torch.finfo(grads.dtype).eps * grads.abs().amax()
    return torch.where(grads.abs() <= floor, torch.zeros_like(grads), grads)


def rescaled(mask: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """mask * mean over domains of grads [num_domains, ...], divided by (1e-10 + the mask's mean)."""
    return mask * grads.mean(0) * (1.0 / (1e-10 + mask.mean()))


def and_mask(grads: torch.Tensor, tau: float) -> torch.Tensor:
    """1 where at least a fraction tau of the domains' gradient signs agree (|mean sign| >= tau), else 0."""
    return (grads.sign().mean(0).abs() >= tau).to(grads.dtype)


def sand_mask(grads: torch.Tensor, tau: float, k: float) -> torch.Tensor:
    """max(0, tanh(k (|mean sign| - tau) / variance over domains)), NaN entries set to 1e-17."""
    if len(grads) < 2:  # the variance of one value is NaN
        variance = torch.full_like(grads[0], NAN_FILL)
    else:
        variance = grads.var(dim=0)
        variance = torch.where(variance.isnan(), torch.full_like(variance, NAN_FILL), variance)
    mask = torch.tanh(k * variance.reciprocal() * (grads.sign().mean(0).abs() - tau))
    mask = torch.maximum(mask, torch.zeros_like(mask))
    return torch.where(mask.isnan(), torch.full_like(mask, NAN_FILL), mask)


class GradientMasking(Algorithm):
    MIN_TRAIN_DOMAINS = 2

    def mask(self, grads: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def synced_gradients(self, loss: torch.Tensor, params: list[torch.nn.Parameter]) -> list[torch.Tensor | None]:
        """d loss / d params, averaged over processes (None where no process's loss reaches the weight)."""
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        for p, g in zip(params, grads):
            p.grad = g
        self.sync_gradients()
        out = [p.grad for p in params]
        for p in params:
            p.grad = None
        return out

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        params = [p for p in self.network.parameters() if p.requires_grad]
        classifier = self.classifier()
        losses = [cross_entropy(classifier(z), b.y) for z, b in zip(self.domain_features(minibatches), minibatches)]
        aux = self.moe_aux_loss()
        self.zero_grad(set_to_none=True)
        per_domain = [self.synced_gradients(loss, params) for loss in losses]
        aux_grads = self.synced_gradients(aux, params) if aux.requires_grad else [None] * len(params)
        for i, p in enumerate(params):
            found = [g[i] for g in per_domain]
            if all(g is None for g in found):
                p.grad = aux_grads[i]
                continue
            grads = without_rounding_noise(torch.stack([torch.zeros_like(p) if g is None else g for g in found]))
            p.grad = rescaled(self.mask(grads), grads)
            aux_grad = aux_grads[i]
            if aux_grad is not None:
                p.grad = p.grad + aux_grad
        self.optimizer.step()  # every process holds the same (synchronised) gradients
        mean_loss = torch.stack(losses).mean()
        return {"loss": (mean_loss + aux).item(), "loss_task": mean_loss.item(), "loss_aux": aux.item()}


@register_algorithm
class ANDMask(GradientMasking):
    DESCRIPTION = "AND-mask: update only the weights whose gradient sign agrees across the training domains"
    REFERENCE = "Parascandolo et al., Learning explanations that are hard to vary, ICLR 2021"
    HPARAMS = {"tau": HParam(1.0, uniform(0.5, 1.0))}

    def mask(self, grads: torch.Tensor) -> torch.Tensor:
        return and_mask(grads, self.hparams["tau"])


@register_algorithm
class SANDMask(GradientMasking):
    DESCRIPTION = "SAND-mask: a smooth mask from the agreement of the domains' gradient signs and magnitudes"
    REFERENCE = ("Shahtalebi et al., SAND-mask: An Enhanced Gradient Masking Strategy for the Discovery of "
                 "Invariances in Domain Generalization, arXiv:2106.02266, 2021")
    HPARAMS = {"tau": HParam(1.0, uniform(0.0, 1.0)), "k": HParam(10.0, log_uniform(-3, 5))}

    def mask(self, grads: torch.Tensor) -> torch.Tensor:
        return sand_mask(grads, self.hparams["tau"], self.hparams["k"])
