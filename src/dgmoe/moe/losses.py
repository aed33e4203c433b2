"""Auxiliary losses of the sparse layers: GMoE's load balancing (App. C.4, after Shazeer et al. 2017 and
V-MoE) and MoGE's expert diversity (eq. 2).

Both losses are squared coefficients of variation over experts (population std, as V-MoE):
  importance (eq. 9):  imp_e = sum_x g(x)_e,             L_imp  = (std(imp) / mean(imp))^2
  load (eq. 10):       p_e(x) = 1 - Phi((eta_k - s_e(x)) / sigma),  load_e = sum_x p_e(x),
                       L_load = (std(load) / mean(load))^2
where s(x) are the clean router logits, eta_k the k-th largest *noisy* logit of the token and sigma the
gate-noise std: p_e(x) is the probability that expert e stays in the top-k when only its own noise is
re-sampled. A layer contributes 0.5 * (L_imp + L_load); the weight lambda is applied by the algorithm.
Token routing balances tokens with g = softmax over all experts (GMoE eq. 9); image routing (MoGE App. A)
balances images with g = the combine weights alpha (zero outside the top-K).

Expert diversity (MoGE eq. 2): linear CKA between the experts' outputs on t tokens forced through every
expert, averaged over the E(E-1)/2 unordered expert pairs (`cka_diversity_loss`).
"""
from __future__ import annotations

import math

import torch


def cv_squared(values: torch.Tensor, eps: float = 1e-10, unbiased: bool = False) -> torch.Tensor:
    """Squared coefficient of variation (population variance / mean^2, or the unbiased variance's) of the last
    dimension: a scalar for a vector, one per row for a matrix (a layer's importance and load in one pass)."""
    values = values.float()
    return values.var(dim=-1, unbiased=unbiased) / (values.mean(dim=-1) ** 2 + eps)


def importance_loss(gate_probs: torch.Tensor) -> torch.Tensor:
    """Eq. 9: gate_probs [T, E] are the softmax gates g(x) (noisy during training)."""
    return cv_squared(gate_probs.sum(dim=0))


def load_probabilities(clean_logits: torch.Tensor, noisy_logits: torch.Tensor, top_k: int, noise_std: float,
                       clean_scores: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 10 per token and expert. `clean_scores` replaces the clean logits in the numerator (the
    official code's variant passes clean probabilities here)."""
    threshold = noisy_logits.topk(top_k, dim=-1).values[:, -1:]
    scores = clean_logits if clean_scores is None else clean_scores
    # Phi(z) = (1 + erf(z / sqrt 2)) / 2, as torch.distributions.Normal.cdf computes it (the same numbers) but
    # without its argument validation, which synchronises with the host on a GPU. (erfc(z / sqrt 2) / 2 takes
    # half the operations, but rounds the tail differently: the golden records of tests/golden drift by 1.5e-5.)
    return 1.0 - 0.5 * (1 + torch.erf((threshold - scores) / noise_std / math.sqrt(2)))


def load_loss(clean_logits: torch.Tensor, noisy_logits: torch.Tensor, top_k: int, noise_std: float,
              clean_scores: torch.Tensor | None = None) -> torch.Tensor:
    return cv_squared(load_probabilities(clean_logits, noisy_logits, top_k, noise_std, clean_scores).sum(dim=0))


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
        raise ValueError(
            f"linear_cka needs [n, d1] and [n, d2] with the same n, got {tuple(x.shape)}, {tuple(y.shape)}")
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
