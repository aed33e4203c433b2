"""A fixed-shape dispatch for fp32 / TF32 with no host reads: every shape is a function of (T, k, N, d, H)
and a static slot count, so a GPU never waits for the CPU (no `.item()`, `.tolist()`, `bincount`, `nonzero`
or boolean-mask indexing) and torch.compile captures it whole.

    out[t] = sum_{j < k} keep_{t,j} g_{t,j} (W2_e act(W1_e x_t + b1_e) + b2_e),  e = expert_idx[t, j]   (GMoE eq. 3)

Layout: the Tutel / V-MoE padded buffer [N, C, d] (Riquelme et al. 2021, Sec. 3.1; Hwang et al. 2023),
with C slots per expert, run as one batched matmul pair. Each assignment's slot
is its rank among its expert's assignments in (token, choice) order, from a cumulative sum of the [T*k, N]
expert one-hot (device only). C defaults to T, a bound no routing can exceed (a token's k experts are
distinct, so an expert gets at most T assignments): the result is exact for every routing, at the price of
computing N*T rows instead of k*T (N/k times the experts' FLOPs; e.g. 3x for GMoE-S/16's 6 experts, top-2).
A smaller static `slots` (the capacity of `capacity_keep_mask`) gives V-MoE's buffer: assignments ranked at or
beyond `slots` among the kept ones are dropped, as capacity drops them; with `keep` from `capacity_keep_mask`
at the same capacity nothing kept is dropped and the result is exact. The fused Triton dispatch
(`dgmoe.moe.kernels`) computes only the T*k rows.

Capacity (`keep`) zeroes the gates of dropped assignments and gives them no slot (they go to one scratch row
that is never read), so they add nothing and get no gradient, as in `masked_dispatch`.

Row movements are deterministic: the token rows are repeated k times (a view and a copy; its backward is a
sum over k), placed by `index_copy` at distinct slots (its backward is a gather), and read back by a gather
whose backward adds into distinct rows except the scratch row, which only ever receives zeros.
"""
from __future__ import annotations

import torch

from dgmoe.moe.experts import Experts, compute_dtype


def assignment_slots(expert_idx: torch.Tensor, num_experts: int, slots: int,
                     keep: torch.Tensor | None = None) -> torch.Tensor:
    """[T*k] int64 row of each (token, choice) assignment in the flattened [N * slots + 1] buffer: expert *
    slots + its rank among the expert's (kept) assignments in (token, choice) order; dropped assignments
    (not kept, or ranked >= slots) get the scratch row N * slots. Device tensors only."""
    flat = expert_idx.reshape(-1)
    onehot = (flat.unsqueeze(1) == torch.arange(num_experts, device=flat.device)).long()  # [A, N]
    if keep is not None:
        onehot = onehot * keep.reshape(-1, 1).long()
    rank = (onehot.cumsum(0) * onehot).sum(-1) - 1  # -1 where not kept
    scratch = torch.full_like(rank, num_experts * slots)
    placed = (rank >= 0) & (rank < slots)
    return torch.where(placed, flat * slots + rank.clamp(0, slots - 1), scratch)


def fixed_shape_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                         keep: torch.Tensor | None = None, slots: int | None = None) -> torch.Tensor:
    """x [T, d]; expert_idx, gates [T, k]; keep [T, k] bool or None; `slots` per expert (default T: exact for
    any routing). Returns [T, d] in x's dtype; the experts run in the autocast dtype when autocast is on (fp32
    matmuls use TF32 where `torch.backends.cuda.matmul.allow_tf32` says so)."""
    if not isinstance(experts, Experts):
        raise TypeError(f"the fixed-shape dispatch runs GMoE's FFN experts (Experts), not {type(experts).__name__}")
    num_tokens, k = expert_idx.shape
    num_experts, dim = experts.num_experts, x.shape[1]
    capacity = num_tokens if slots is None else slots
    if capacity < 1:
        raise ValueError(f"slots must be >= 1, got {capacity}")
    dtype = compute_dtype(x)
    slot = assignment_slots(expert_idx, num_experts, capacity, keep)
    weights = gates if keep is None else gates * keep
    weights = torch.where(slot == num_experts * capacity, 0.0, weights.reshape(-1)).view(num_tokens, k)
    with torch.autocast(x.device.type, enabled=False):
        rows = x.to(dtype).unsqueeze(1).expand(num_tokens, k, dim).reshape(num_tokens * k, dim)
        buffer = rows.new_zeros(num_experts * capacity + 1, dim).index_copy(0, slot, rows)
        w1, b1 = experts.fc1_weight.to(dtype), experts.fc1_bias.to(dtype)
        w2, b2 = experts.fc2_weight.to(dtype), experts.fc2_bias.to(dtype)
        padded = buffer[:-1].view(num_experts, capacity, dim)
        h = experts.drop(experts.act(torch.baddbmm(b1.unsqueeze(1), padded, w1.transpose(1, 2))))
        y = torch.baddbmm(b2.unsqueeze(1), h, w2.transpose(1, 2)).reshape(num_experts * capacity, dim)
        y = torch.cat([y, y.new_zeros(1, dim)]).index_select(0, slot).view(num_tokens, k, dim)
        out = (y * weights.unsqueeze(-1).to(y.dtype)).sum(1)
    return out.to(x.dtype)
