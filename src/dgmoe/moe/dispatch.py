"""Token dispatch: send each token to its k experts, combine the gated outputs.

Every production path starts with one stable sort of the T*k (token, expert) assignments by expert and
ends with the gate multiply and one scatter-add; there is no [T, E] one-hot and no boolean mask per expert.
- `sorted_dispatch` ("grouped", the default): one matmul pair per expert on its contiguous slice of the
  sorted rows, in the fused `GroupedExpertFFN` (hand-written backward: memory of a dense FFN over the
  T*k assignments, no concatenations). Fastest on a quiet 2-core CPU (docs/benchmarks.md, section 4).
- `sorted_autograd_dispatch`: the same through plain autograd (not a layer option of its own); supports
  double backward and expert dropout, so "grouped" hands it those cases: expert dropout, and every forward
  inside `twice_differentiable()` (algorithms that differentiate gradients, e.g. IGA).
`dgmoe.moe.sync_free.sync_free_dispatch` is the same computation with fixed shapes and no host
synchronisation (grouped GEMMs with device-side offsets); `dgmoe.moe.layer.choose_dispatch` picks it under
torch.compile and on GPUs with a fused grouped GEMM.
`masked_dispatch` ("mask") is the straightforward reference they are tested against. `padded_dispatch`
places the rows in an [N, C, d] buffer padded to C per expert and runs all experts as one batched matmul
pair: with C = the capacity it is the Tutel / V-MoE layout, a candidate of `dgmoe bench layer` (slower than
"grouped" on CPU, so not a layer option). `capacity_keep_mask`
reproduces the official code's capacity with token dropping and batch-prioritised routing (Riquelme et
al. 2021).
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch

from dgmoe.moe.experts import ExpertBank, Experts
from dgmoe.moe.fused import GroupedExpertFFN
from dgmoe.scope import SCOPE, scoped


@contextlib.contextmanager
def twice_differentiable() -> Iterator[None]:
    """Forwards inside the block take the plain-autograd expert path, whose graph supports double backward
    (the fused `GroupedExpertFFN` does not)."""
    with scoped(twice_differentiable=True):
        yield


def sorted_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, d]; expert_idx, gates [T, k]; keep [T, k] bool (None keeps every assignment).

    Runs the fused `GroupedExpertFFN` (memory of a dense FFN over T*k tokens, no concatenations) when
    gradients are recorded. Without gradients (inference), with expert dropout active (which only it
    implements) and inside `twice_differentiable()`, the autograd path runs: it keeps no [T*k, hidden]
    buffer alive across experts; so does an activation other than GELU (the fused backward is GELU's), and so
    do the adapter banks of `dgmoe.moe.adapter_experts` (experts of their own shapes, d_in -> d_out)."""
    if (not isinstance(experts, Experts) or not torch.is_grad_enabled() or (experts.drop.p > 0 and experts.training)
            or SCOPE.twice_differentiable or experts.activation != "gelu"):
        return sorted_autograd_dispatch(x, expert_idx, gates, experts, keep)
    _, gate_sorted, token_sorted, counts = _sort_assignments(expert_idx, gates, keep, experts.num_experts)
    return GroupedExpertFFN.apply(x, token_sorted, gate_sorted, counts.tolist(), experts.fc1_weight,
                                  experts.fc1_bias, experts.fc2_weight, experts.fc2_bias)


def sorted_autograd_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                             keep: torch.Tensor | None = None) -> torch.Tensor:
    """`sorted_dispatch` through plain autograd (supports double backward and expert dropout)."""
    _, gate_sorted, token_sorted, counts = _sort_assignments(expert_idx, gates, keep, experts.num_experts)
    y = experts.forward_grouped(x.index_select(0, token_sorted), counts.tolist())
    y = y * gate_sorted.unsqueeze(1).to(y.dtype)
    return x.new_zeros(x.shape[0], experts.out_features).index_add_(0, token_sorted, y.to(x.dtype))


def _sort_assignments(expert_idx: torch.Tensor, gates: torch.Tensor, keep: torch.Tensor | None, num_experts: int):
    k = expert_idx.shape[1]
    flat_expert = expert_idx.reshape(-1)
    flat_gate = gates.reshape(-1)
    token_of = torch.arange(expert_idx.shape[0], device=expert_idx.device).repeat_interleave(k)
    if keep is not None:
        kept = keep.reshape(-1)
        flat_expert, flat_gate, token_of = flat_expert[kept], flat_gate[kept], token_of[kept]
    order = torch.argsort(flat_expert, stable=True)
    counts = torch.bincount(flat_expert, minlength=num_experts)
    return flat_expert[order], flat_gate[order], token_of[order], counts


def padded_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                    keep: torch.Tensor | None = None, slots: int | None = None) -> torch.Tensor:
    """Same result as `sorted_dispatch`, with all experts in one padded batched matmul pair.

    Each expert gets `slots` rows (default: the busiest expert's count). With `slots` set to the capacity
    of `capacity_keep_mask` this is the Tutel / V-MoE layout: a fixed [N, capacity, d] buffer."""
    num_experts = experts.num_experts
    expert_sorted, gate_sorted, token_sorted, counts = _sort_assignments(expert_idx, gates, keep, num_experts)
    capacity = max(int(counts.max()), 1) if slots is None else slots
    if int(counts.max()) > capacity:
        raise ValueError(f"an expert has {int(counts.max())} assignments but only {capacity} slots")
    starts = torch.cumsum(counts, 0) - counts
    slot = expert_sorted * capacity + (torch.arange(len(expert_sorted), device=x.device) - starts[expert_sorted])
    rows = x.new_zeros(num_experts * capacity, x.shape[1]).index_copy(0, slot, x.index_select(0, token_sorted))
    y = experts.forward_padded(rows.view(num_experts, capacity, -1)).reshape(num_experts * capacity, -1)
    y = y.index_select(0, slot) * gate_sorted.unsqueeze(1).to(y.dtype)
    return torch.zeros_like(x).index_add_(0, token_sorted, y.to(x.dtype))


def masked_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """Reference: loop over experts with boolean masks (slow; tests and benchmarks only)."""
    if keep is not None:
        gates = gates * keep
    out = x.new_zeros(x.shape[0], experts.out_features)
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
    # one-hot by comparison: F.one_hot validates the indices, a host synchronisation on a GPU
    onehot = (slot_major.unsqueeze(1) == torch.arange(num_experts, device=slot_major.device)).long()
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1
    keep_sorted = (position < capacity).view(k, num_tokens)
    keep = torch.empty(k, num_tokens, dtype=torch.bool, device=expert_idx.device)
    keep[:, order] = keep_sorted
    return keep.t()
