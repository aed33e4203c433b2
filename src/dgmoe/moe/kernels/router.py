"""The router in a few kernels: the projection (linear, or the cosine router's normalised product) by the
router module's own forward, then one fused kernel for the noise, softmax, top-k, renormalisation and the
balance terms' importance and load sums (`router_kernels.py`), and one for its backward.

`fused_route` returns what `MoEMlp.route` computes for token routing with the paper's load loss (GMoE App.
C.4: importance on the noisy softmax, load on the clean logits against the k-th largest noisy logit), and the
per-expert sums the balance loss 0.5 (cv^2(importance) + cv^2(load)) is made of, given the same standard
normal noise. The official code's 'tutel' and MoA's variants, image routing and capacity are the torch path's.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton

from dgmoe.moe.kernels.router_kernels import route_backward, route_forward
from dgmoe.moe.losses import cv_squared

_ROWS = 16  # token rows per program


class FusedRouting(NamedTuple):
    logits: torch.Tensor        # [T, N] clean router logits
    noisy_logits: torch.Tensor  # [T, N]
    probs: torch.Tensor         # [T, N] softmax of the noisy logits
    gates: torch.Tensor         # [T, k]
    expert_idx: torch.Tensor    # [T, k] int64
    importance: torch.Tensor    # [N] sum over tokens of probs (eq. 9)
    load: torch.Tensor          # [N] sum over tokens of P(expert stays in the top-k) (eq. 10); zeros without noise
    noisy: bool                 # whether gate noise was added (the load term exists only then)

    def balance_loss(self) -> torch.Tensor:
        """0.5 (cv^2(importance) + cv^2(load)) (GMoE App. C.4); the load term only with gate noise, as
        `MoEMlp.balance_loss` (which also all-reduces the sums under multi-process training)."""
        sums = torch.stack([self.importance, self.load]) if self.noisy else self.importance.unsqueeze(0)
        return 0.5 * cv_squared(sums).sum()


class _Route(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, noise, sigma, top_k, renormalize):  # type: ignore[override]
        num_rows, num_experts = logits.shape
        blocks = triton.cdiv(num_rows, _ROWS)
        width = max(triton.next_power_of_2(num_experts), 2)
        with_noise = noise is not None and sigma > 0
        new = logits.new_empty
        noisy, probs = new(num_rows, num_experts), new(num_rows, num_experts)
        gates, idx = new(num_rows, top_k), torch.empty(num_rows, top_k, device=logits.device, dtype=torch.int64)
        kth = torch.zeros(num_rows, device=logits.device, dtype=torch.int32)
        imp_part, load_part = new(blocks, num_experts), logits.new_zeros(blocks, num_experts)
        route_forward[(blocks,)](logits, noise if with_noise else logits, noisy, probs, gates, idx, kth, imp_part,
                                 load_part, num_rows, num_experts, float(sigma) if with_noise else 1.0,
                                 K=top_k, KP=max(triton.next_power_of_2(top_k), 2), RENORM=renormalize,
                                 NOISE=with_noise, LOAD=with_noise, BT=_ROWS, BE=width)
        ctx.save_for_backward(logits, noisy, probs, gates, idx, kth)
        ctx.mark_non_differentiable(idx)
        ctx.config = (float(sigma) if with_noise else 1.0, top_k, renormalize, with_noise, width)
        return noisy, probs, gates, idx, imp_part.sum(0), load_part.sum(0)

    @staticmethod
    def backward(ctx, d_noisy, d_probs, d_gates, _d_idx, d_imp, d_load):  # type: ignore[override]
        logits, noisy, probs, gates, idx, kth = ctx.saved_tensors
        sigma, top_k, renormalize, with_noise, width = ctx.config
        num_rows, num_experts = logits.shape

        def dense(grad, *shape):
            return torch.zeros(*shape, device=logits.device) if grad is None else grad.float().contiguous()

        d_logits = torch.empty_like(logits)
        route_backward[(triton.cdiv(num_rows, _ROWS),)](
            logits, noisy, probs, gates, idx, kth, dense(d_noisy, num_rows, num_experts),
            dense(d_probs, num_rows, num_experts), dense(d_gates, num_rows, top_k), dense(d_imp, num_experts),
            dense(d_load, num_experts), d_logits, num_rows, num_experts, sigma,
            K=top_k, RENORM=renormalize, LOAD=with_noise, BT=_ROWS, BE=width)
        return d_logits, None, None, None, None


def fused_route(logits: torch.Tensor, top_k: int, noise: torch.Tensor | None = None, noise_std: float = 0.0,
                renormalize: bool = True) -> FusedRouting:
    """logits [T, N] (the router module's output); noise [T, N] standard normal draws (None or noise_std 0: no
    noise, as at evaluation). Renormalises the top-k gates when `renormalize` and top_k > 1 (as `route` for
    token routing). Gradients flow to the logits from every output but the expert indices."""
    num_rows, num_experts = logits.shape
    if not 1 <= top_k <= min(num_experts, 8):
        raise ValueError(f"the fused router takes 1 <= top_k <= min(N, 8), got top_k={top_k} for N={num_experts}")
    if noise is not None and noise.shape != logits.shape:
        raise ValueError(f"noise must be shaped like the logits {tuple(logits.shape)}, got {tuple(noise.shape)}")
    logits = logits.float().contiguous()
    draws = noise.float().contiguous() if noise is not None and noise_std > 0 else None
    noisy, probs, gates, idx, importance, load = _Route.apply(logits, draws, noise_std, top_k,
                                                              renormalize and top_k > 1)
    return FusedRouting(logits, noisy if draws is not None else logits, probs, gates, idx, importance, load,
                        draws is not None)
