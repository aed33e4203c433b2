"""Token dispatch: send each token to its k experts, combine the gated outputs.

`sorted_dispatch` is the production path: one stable sort of the T*k (token, expert) assignments by expert,
one gather, one matmul pair per expert on a contiguous slice, the gate multiply and one scatter-add. There
is no [T, E] one-hot and no boolean mask per expert. `masked_dispatch` is the straightforward reference it
is tested against. `capacity_keep_mask` reproduces the official code's capacity with token dropping and
batch-prioritised routing (Riquelme et al. 2021).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from dgmoe.moe.experts import Experts


def sorted_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, d]; expert_idx, gates [T, k]; keep [T, k] bool (None keeps every assignment)."""
    k = expert_idx.shape[1]
    flat_expert = expert_idx.reshape(-1)
    flat_gate = gates.reshape(-1)
    token_of = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)
    if keep is not None:
        kept = keep.reshape(-1)
        flat_expert, flat_gate, token_of = flat_expert[kept], flat_gate[kept], token_of[kept]
    order = torch.argsort(flat_expert, stable=True)
    token_sorted = token_of[order]
    counts = torch.bincount(flat_expert, minlength=experts.num_experts).tolist()
    y = experts.forward_grouped(x.index_select(0, token_sorted), counts)
    y = y * flat_gate[order].unsqueeze(1).to(y.dtype)
    return torch.zeros_like(x).index_add_(0, token_sorted, y.to(x.dtype))


def masked_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """Reference: loop over experts with boolean masks (slow; tests and benchmarks only)."""
    if keep is not None:
        gates = gates * keep
    out = torch.zeros_like(x)
    for e in range(experts.num_experts):
        weight = (gates * (expert_idx == e)).sum(dim=1)
        rows = (expert_idx == e).any(dim=1) if keep is None else ((expert_idx == e) & keep).any(dim=1)
        if rows.any():
            out[rows] += weight[rows].unsqueeze(1).to(x.dtype) * experts.expert(e, x[rows])
    return out


def expert_capacity(num_tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    """Slots per expert, as the official code: k * int(factor * ceil(T / N))."""
    return top_k * int(capacity_factor * math.ceil(num_tokens / num_experts))


def capacity_keep_mask(expert_idx: torch.Tensor, gates: torch.Tensor, num_experts: int, capacity: int,
                       batch_prioritized: bool = True) -> torch.Tensor:
    """Which (token, choice) assignments get a slot. Choices fill slot-major (every token's first choice
    before any second choice); within a choice, tokens go in order of their top gate when
    `batch_prioritized`, else in token order."""
    num_tokens, k = expert_idx.shape
    if batch_prioritized:
        order = torch.argsort(gates[:, 0], descending=True, stable=True)
    else:
        order = torch.arange(num_tokens, device=expert_idx.device)
    slot_major = expert_idx[order].t().reshape(-1)
    onehot = F.one_hot(slot_major, num_experts)
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1
    keep_sorted = (position < capacity).view(k, num_tokens)
    keep = torch.empty(k, num_tokens, dtype=torch.bool, device=expert_idx.device)
    keep[:, order] = keep_sorted
    return keep.t()
