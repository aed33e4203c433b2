"""MoGE training objective (Rangzan et al., eq. 4) on a network with MoGE blocks:

    L = L_task + lambda_aux L_aux + lambda_CKA L_CKA + lambda_SupCon L_SupCon

- L_task: cross-entropy on the routed prediction p(y | x, m) (App. A);
- L_aux and L_CKA: the MoGE blocks' own auxiliary terms (load balancing over images, App. A; forced-token
  linear CKA between experts, eq. 2), added with every sparse model's auxiliary losses by `moe_aux_loss`
  (weights `moe_aux_weight` and `moe_cka_weight`, shared hyperparameters of MoGE backbones);
- L_SupCon: eq. 3 on each block's pooled shared-expert features, with the block's argmax routing as the
  discovered domain, averaged over MoGE blocks: this algorithm's own loss.

The paper reports the best worst-region accuracy at lambda_SupCon ~ 0.1 (Fig. 2a).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, Metrics, concat_batches, cross_entropy, detached
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, fixed, log_uniform, positive
from dgmoe.moe.auxiliary import aux_losses, sparse_layers


def cross_domain_supcon(features: torch.Tensor, labels: torch.Tensor, domains: torch.Tensor,
                        temperature: float = 0.07, max_anchors: int | None = None,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """Eq. 3 of MoGE on features [B, D] (normalised here), labels [B] and discovered domains [B].

        L = -1/|A| sum_{i in A} [ log sum_{p in P_i} e^{<q_i,p>/tau} - log sum_{v in P_i u N_i} e^{<q_i,v>/tau} ]

    P_i = same label, other domain; N_i = other label, same domain; A = anchors with both sets non-empty
    (optionally a random subset of at most `max_anchors`). Computed in fp32 with masked log-sum-exp, so the
    result is finite for any input; with no valid anchor it is 0, still connected to the graph.
    """
    if features.ndim != 2 or labels.shape != (features.shape[0],) or domains.shape != (features.shape[0],):
        raise ValueError(f"cross_domain_supcon needs features [B, D], labels [B], domains [B]; got "
                         f"{tuple(features.shape)}, {tuple(labels.shape)}, {tuple(domains.shape)}")
    if temperature <= 0:
        raise ValueError(f"SupCon temperature must be positive, got {temperature}")
    q = F.normalize(features.float(), dim=1, eps=1e-8)
    same_y = labels[:, None] == labels[None, :]
    same_d = domains[:, None] == domains[None, :]
    pos = same_y & ~same_d
    neg = ~same_y & same_d
    anchors = pos.any(1) & neg.any(1)
    if max_anchors is not None and int(anchors.sum()) > max_anchors:  # (a host read, only with a cap)
        idx = anchors.nonzero().squeeze(1)
        keep = idx[torch.randperm(idx.numel(), generator=generator, device="cpu")[:max_anchors].to(idx.device)]
        anchors = torch.zeros_like(anchors).index_fill_(0, keep, True)
    # every row computed, the anchors' terms averaged: fixed shapes, no host synchronisation on a GPU
    logits = (q @ q.t()) / temperature
    neg_inf = torch.finfo(logits.dtype).min
    log_pos = torch.where(pos, logits, neg_inf).logsumexp(dim=1)
    log_all = torch.where(pos | neg, logits, neg_inf).logsumexp(dim=1)
    terms = torch.where(anchors, log_pos - log_all, torch.zeros_like(log_pos))
    return -terms.sum() / anchors.sum().clamp_min(1)


@register_algorithm
class MoGE(Algorithm):
    DESCRIPTION = "Mixture of Geographical Experts: task + load balance + expert CKA + cross-domain SupCon (eq. 4)"
    REFERENCE = "Rangzan et al., Mixture of Geographical Experts: Disentangling Earth (GCPR 2026)"
    HPARAMS = {
        "moge_supcon_weight": HParam(0.1, log_uniform(-2, 0)),
        "moge_supcon_temperature": HParam(0.07, fixed(0.07), positive),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        layers = sparse_layers(network).values()
        if not any(layer.shared is not None and layer.config.routing == "image" for layer in layers):
            raise ValueError("the MoGE algorithm needs a MoGE network (e.g. moge_tiny_patch16_224): image-routed "
                             f"blocks with a shared expert; got {type(network).__name__} without them")

    def supcon_loss(self, y: torch.Tensor) -> torch.Tensor:
        tau = self.hparams["moge_supcon_temperature"]
        found = [layer.shared_features() for layer in sparse_layers(self.network).values()]
        terms = [cross_domain_supcon(features, y, domains, tau) for features, domains in filter(None, found)]
        return torch.stack(terms).mean() if terms else torch.zeros((), device=y.device)

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        batch = concat_batches(minibatches)
        task = cross_entropy(self.logits(batch), batch.y)
        aux = self.moe_aux_loss()  # balance and CKA, weighted
        cka = aux_losses(self.network).get("cka", torch.zeros((), device=batch.y.device))
        supcon = self.supcon_loss(batch.y)
        loss = task + aux + self.hparams["moge_supcon_weight"] * supcon
        self.step(loss)
        gammas = [layer.gamma for layer in sparse_layers(self.network).values() if layer.gamma is not None]
        return detached(loss=loss, loss_task=task, loss_aux=aux, loss_cka=cka, loss_supcon=supcon,
                        gamma=torch.stack(gammas).mean())
