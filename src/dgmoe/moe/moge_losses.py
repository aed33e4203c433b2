"""MoGE's auxiliary losses (Rangzan et al., §2.1 (A)-(C), App. A), computed in fp32 (fp64 where noted).

- `linear_cka` / `cka_diversity_loss`: eq. 2, linear CKA between expert outputs on t forced tokens,
  averaged over the E(E-1)/2 unordered expert pairs.
- `cross_domain_supcon`: eq. 3, supervised contrast on L2-normalised shared-expert features with positives
  = same class in another discovered domain and negatives = other class in the same discovered domain.
- `routing_balance_loss`: App. A, 0.5 * (L_imp + L_load) over images (MoGE routes whole images).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dgmoe.moe.losses import importance_loss, load_loss

_EPS = 1e-12


def _centered(x: torch.Tensor) -> torch.Tensor:
    x = x.double() if x.dtype == torch.float64 else x.float()
    x = x - x.mean(dim=0, keepdim=True)
    # CKA is scale invariant; normalising first keeps the fourth powers in the norms far from overflow.
    return x / x.norm().clamp_min(_EPS)


def linear_cka(x: torch.Tensor, y: torch.Tensor, eps: float = _EPS) -> torch.Tensor:
    """Linear CKA (Kornblith et al. 2019; MoGE eq. 2) between x [n, d1] and y [n, d2], rows = samples.

    ||X~^T Y~||_F^2 / (||X~^T X~||_F ||Y~^T Y~||_F) with column-centred X~, Y~, in the feature form when
    n > d and the (cheaper, identical) Gram form <X~X~^T, Y~Y~^T>_F otherwise.
    """
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"linear_cka needs [n, d1] and [n, d2] with the same n, got {tuple(x.shape)}, {tuple(y.shape)}")
    xc, yc = _centered(x), _centered(y)
    n = x.shape[0]
    if n > max(x.shape[1], y.shape[1]):
        cross = (xc.t() @ yc).pow(2).sum()
        nx, ny = (xc.t() @ xc).norm(), (yc.t() @ yc).norm()
    else:
        kx, ky = xc @ xc.t(), yc @ yc.t()
        cross, nx, ny = (kx * ky).sum(), kx.norm(), ky.norm()
    return cross / (nx * ny).clamp_min(eps)


def cka_diversity_loss(expert_outputs: torch.Tensor, eps: float = _EPS) -> torch.Tensor:
    """Eq. 2: mean linear CKA over unordered expert pairs. expert_outputs [E, t, D] (H_k = f_k(H))."""
    if expert_outputs.ndim != 3:
        raise ValueError(f"expert_outputs must be [E, t, D], got {tuple(expert_outputs.shape)}")
    num_experts, t, _ = expert_outputs.shape
    if num_experts < 2:
        return expert_outputs.sum() * 0.0
    h = expert_outputs.float()
    h = h - h.mean(dim=1, keepdim=True)
    h = h / h.flatten(1).norm(dim=1).clamp_min(eps)[:, None, None]
    grams = (h @ h.transpose(1, 2)).flatten(1)  # [E, t*t]: <K_i, K_j>_F = ||H~_i^T H~_j||_F^2
    norms = grams.norm(dim=1)
    sim = (grams @ grams.t()) / (norms[:, None] * norms[None, :]).clamp_min(eps)
    iu = torch.triu_indices(num_experts, num_experts, offset=1, device=sim.device)
    return sim[iu[0], iu[1]].mean()


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
    if max_anchors is not None and int(anchors.sum()) > max_anchors:
        idx = anchors.nonzero().squeeze(1)
        keep = idx[torch.randperm(idx.numel(), generator=generator, device="cpu")[:max_anchors].to(idx.device)]
        anchors = torch.zeros_like(anchors).index_fill_(0, keep, True)
    if not bool(anchors.any()):
        return q.sum() * 0.0
    logits = (q[anchors] @ q.t()) / temperature
    neg_inf = torch.finfo(logits.dtype).min
    log_pos = torch.where(pos[anchors], logits, neg_inf).logsumexp(dim=1)
    log_all = torch.where((pos | neg)[anchors], logits, neg_inf).logsumexp(dim=1)
    return -(log_pos - log_all).mean()


def routing_balance_loss(gates: torch.Tensor, clean_logits: torch.Tensor, noisy_logits: torch.Tensor,
                         top_k: int, noise_std: float) -> torch.Tensor:
    """App. A: 0.5 * (L_imp + L_load) over a batch of images.

    gates [B, E] are the combine weights alpha (zero outside the top-K); clean/noisy_logits [B, E] are
    s(r)/tau before and after the gate noise of std `noise_std`. Without noise the load term is dropped.
    """
    loss = importance_loss(gates)
    if noise_std > 0:
        loss = loss + load_loss(clean_logits, noisy_logits, top_k, noise_std)
    return 0.5 * loss
