"""The router in a few kernels: the projection (linear, or the cosine router's normalised product) by the
router module's own forward, then one fused kernel for the noise, softmax, top-k, renormalisation and the
balance terms' importance and load sums (`router_kernels.py`), and one for its backward.

`fused_route` returns what `MoEMlp.route` computes for token routing with the paper's load loss (GMoE App.
C.4: importance on the noisy softmax, load on the clean logits against the k-th largest noisy logit), and the
per-expert sums the balance loss 0.5 (cv^2(importance) + cv^2(load)) is made of, given the same standard
normal noise. The official code's 'tutel' and MoA's variants, image routing and capacity are the torch path's.
Both directions are custom operators (`dgmoe::fused_route`, `dgmoe::fused_route_backward`, with fake
implementations and a registered autograd formula), so torch.compile captures them without a graph break.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
from torch import Tensor

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


@torch.library.custom_op("dgmoe::fused_route", mutates_args=())
def route(logits: Tensor, noise: Tensor | None, sigma: float, top_k: int,
          renormalize: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """logits [T, N] fp32, noise [T, N] or None (no noise) -> (noisy [T, N], probs [T, N], gates [T, k], expert
    indices [T, k] int64, importance [N], load [N], the position of the k-th largest noisy logit [T] int32,
    kept for the backward)."""
    num_rows, num_experts = logits.shape
    blocks = triton.cdiv(num_rows, _ROWS)
    with_noise = noise is not None
    new = logits.new_empty
    noisy, probs = new(num_rows, num_experts), new(num_rows, num_experts)
    gates, idx = new(num_rows, top_k), torch.empty(num_rows, top_k, device=logits.device, dtype=torch.int64)
    kth = torch.zeros(num_rows, device=logits.device, dtype=torch.int32)
    imp_part, load_part = new(blocks, num_experts), logits.new_zeros(blocks, num_experts)
    route_forward[(blocks,)](logits, noise if noise is not None else logits, noisy, probs, gates, idx, kth, imp_part,
                             load_part, num_rows, num_experts, sigma if with_noise else 1.0,
                             K=top_k, KP=max(triton.next_power_of_2(top_k), 2), RENORM=renormalize,
                             NOISE=with_noise, LOAD=with_noise, BT=_ROWS, BE=_width(num_experts))
    return noisy, probs, gates, idx, imp_part.sum(0), load_part.sum(0), kth


@route.register_fake
def _(logits, noise, sigma, top_k, renormalize):
    num_rows, num_experts = logits.shape
    new = logits.new_empty
    return (new(num_rows, num_experts), new(num_rows, num_experts), new(num_rows, top_k),
            new(num_rows, top_k, dtype=torch.int64), new(num_experts), new(num_experts),
            new(num_rows, dtype=torch.int32))


@torch.library.custom_op("dgmoe::fused_route_backward", mutates_args=())
def route_grad(logits: Tensor, noisy: Tensor, probs: Tensor, gates: Tensor, idx: Tensor, kth: Tensor,
               d_noisy: Tensor, d_probs: Tensor, d_gates: Tensor, d_imp: Tensor, d_load: Tensor, sigma: float,
               top_k: int, renormalize: bool, with_noise: bool) -> Tensor:
    """The logits' gradient [T, N] from the gradients of every differentiable output of `route` (dense, fp32)."""
    num_rows, num_experts = logits.shape
    d_logits = torch.empty_like(logits)
    route_backward[(triton.cdiv(num_rows, _ROWS),)](
        logits, noisy, probs, gates, idx, kth, d_noisy, d_probs, d_gates, d_imp, d_load, d_logits, num_rows,
        num_experts, sigma if with_noise else 1.0, K=top_k, RENORM=renormalize, LOAD=with_noise, BT=_ROWS,
        BE=_width(num_experts))
    return d_logits


@route_grad.register_fake
def _(logits, noisy, probs, gates, idx, kth, d_noisy, d_probs, d_gates, d_imp, d_load, sigma, top_k, renormalize,
      with_noise):
    return torch.empty_like(logits)


def _width(num_experts: int) -> int:
    return max(triton.next_power_of_2(num_experts), 2)


def _setup_context(ctx, inputs, output) -> None:
    logits, noise, sigma, top_k, renormalize = inputs
    noisy, probs, gates, idx, _importance, _load, kth = output
    ctx.save_for_backward(logits, noisy, probs, gates, idx, kth)
    ctx.config = (sigma, top_k, renormalize, noise is not None)
    ctx.set_materialize_grads(False)  # `dense` makes the zeros the kernel reads


def _backward(ctx, d_noisy, d_probs, d_gates, _d_idx, d_imp, d_load, _d_kth):
    logits, noisy, probs, gates, idx, kth = ctx.saved_tensors
    sigma, top_k, renormalize, with_noise = ctx.config
    num_rows, num_experts = logits.shape

    def dense(grad, *shape):
        return logits.new_zeros(*shape) if grad is None else grad.float().contiguous()

    d_logits = route_grad(logits, noisy, probs, gates, idx, kth, dense(d_noisy, num_rows, num_experts),
                          dense(d_probs, num_rows, num_experts), dense(d_gates, num_rows, top_k),
                          dense(d_imp, num_experts), dense(d_load, num_experts), sigma, top_k, renormalize,
                          with_noise)
    return d_logits, None, None, None, None


route.register_autograd(_backward, setup_context=_setup_context)


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
    noisy, probs, gates, idx, importance, load, _kth = route(logits, draws, float(noise_std), top_k,
                                                            renormalize and top_k > 1)
    return FusedRouting(logits, noisy if draws is not None else logits, probs, gates, idx, importance, load,
                        draws is not None)
