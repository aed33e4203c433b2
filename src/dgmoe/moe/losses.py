"""Auxiliary load-balancing losses of GMoE App. C.4 (after Shazeer et al. 2017 and V-MoE).

Both losses are squared coefficients of variation over experts (population std, as V-MoE):
  importance (eq. 9):  imp_e = sum_x g(x)_e,             L_imp  = (std(imp) / mean(imp))^2
  load (eq. 10):       p_e(x) = 1 - Phi((eta_k - s_e(x)) / sigma),  load_e = sum_x p_e(x),
                       L_load = (std(load) / mean(load))^2
where s(x) are the clean router logits, eta_k the k-th largest *noisy* logit of the token and sigma the
gate-noise std: p_e(x) is the probability that expert e stays in the top-k when only its own noise is
re-sampled. A layer contributes 0.5 * (L_imp + L_load); the weight lambda is applied by the algorithm.
"""
from __future__ import annotations

import torch


def cv_squared(values: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """Squared coefficient of variation (population variance / mean^2)."""
    values = values.float()
    return values.var(unbiased=False) / (values.mean() ** 2 + eps)


def importance_loss(gate_probs: torch.Tensor) -> torch.Tensor:
    """Eq. 9: gate_probs [T, E] are the softmax gates g(x) (noisy during training)."""
    return cv_squared(gate_probs.sum(dim=0))


def load_probabilities(clean_logits: torch.Tensor, noisy_logits: torch.Tensor, top_k: int, noise_std: float,
                       clean_scores: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 10 per token and expert. `clean_scores` replaces the clean logits in the numerator (the
    official code's variant passes clean probabilities here)."""
    threshold = noisy_logits.topk(top_k, dim=-1).values[:, -1:]
    scores = clean_logits if clean_scores is None else clean_scores
    normal = torch.distributions.Normal(torch.zeros((), device=scores.device), torch.ones((), device=scores.device))
    return 1.0 - normal.cdf((threshold - scores) / noise_std)


def load_loss(clean_logits: torch.Tensor, noisy_logits: torch.Tensor, top_k: int, noise_std: float,
              clean_scores: torch.Tensor | None = None) -> torch.Tensor:
    return cv_squared(load_probabilities(clean_logits, noisy_logits, top_k, noise_std, clean_scores).sum(dim=0))
