"""Token dispatch with no host synchronisation: every shape is fixed by (T, k, N), so a GPU never waits for
the CPU and torch.compile captures the whole layer in one graph.

    out[t] = sum_{j < k} keep_{t,j} g_{t,j} (W2_e GELU(W1_e x_t + b1_e) + b2_e),  e = expert_idx[t, j]   (GMoE eq. 3)

Steps, all on the device:
1. one stable sort of the A = T*k assignments by expert; its inverse permutation (a scatter of arange);
2. rows per expert with `torch.histc` (fixed output shape, unlike `bincount`, whose size depends on the
   data) and their int32 cumulative offsets;
3. the gathered rows through two grouped GEMMs (`F.grouped_mm` / `torch._grouped_mm`: one kernel over all
   experts on CUDA SM90+ in bf16; a loop over experts elsewhere) with the offsets as a device tensor;
4. each expert's bias added by a gather whose backward is a matmul with the one-hot expert matrix
   (`expert_bias`): the backward of a per-row bias gather is an atomic scatter-add onto N rows, which took
   87% of an H200's time in the layer (docs/benchmarks.md, GPU section);
5. the outputs un-permuted by the inverse permutation, viewed [T, k, d], gated and summed over k: a gather
   and a reduction instead of an atomic scatter-add, and a gather by the sorting permutation in the backward
   (torch's `index_select` backward is an `index_add`, atomic adds a permutation never needs), so forward
   and backward are deterministic;
6. in training without expert dropout, the experts' FFN (steps 3 and 4: the gather, both grouped GEMMs, the
   biases and the activation) is recomputed in the backward (`torch.utils.checkpoint`) from the layer's input,
   which the router keeps anyway: the layer keeps none of the [T*k, d] gathered rows and [T*k, hidden]
   activations (about 260 MB per GMoE-S/16 layer at batch 96 in bf16, 2 x 116 MB of activations and 29 MB of
   rows), for two more grouped GEMMs in the backward (about 0.2 ms per layer on an H200); the values and
   gradients are the same. With expert dropout nothing is recomputed: the mask must be the forward's.
Capacity (`keep`, the official code's token dropping) zeroes the gate of a dropped assignment instead of
removing its row, which keeps the shapes fixed: a dropped assignment adds nothing to the output and gets
no gradient, as in the sorted dispatch, at the cost of computing its row.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from dgmoe.moe.experts import Experts, compute_dtype

GROUPED_MM: Callable[..., torch.Tensor] | None = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def fast_grouped_gemm(device: torch.device, dtype: torch.dtype) -> bool:
    """True where `F.grouped_mm` is one fused kernel: CUDA compute capability 9.0+ (H100, H200, B200) in
    bf16. Elsewhere torch runs it as a loop over experts (on CUDA in fp32, one that synchronises)."""
    if GROUPED_MM is None or device.type != "cuda" or dtype != torch.bfloat16:
        return False
    return torch.cuda.get_device_capability(device) >= (9, 0)


class _GatherAssignments(torch.autograd.Function):
    """rows = x[token_of[i]] for the sorted assignments; the backward un-sorts the row gradients with the
    inverse permutation and sums each token's k of them (no atomic scatter)."""

    @staticmethod
    def forward(ctx, x, token_sorted, inverse, k):  # type: ignore[override]
        ctx.save_for_backward(inverse)
        ctx.k = k
        return x.index_select(0, token_sorted)

    @staticmethod
    def backward(ctx, grad_rows):  # type: ignore[override]
        (inverse,) = ctx.saved_tensors
        grad = grad_rows.index_select(0, inverse)
        return grad.view(-1, ctx.k, grad.shape[-1]).sum(1), None, None, None


class _Permute(torch.autograd.Function):
    """rows.index_select(0, index) for a permutation `index`; the backward gathers by its inverse instead of
    scattering (`index_add`) by it: the same numbers, without atomics on a GPU."""

    @staticmethod
    def forward(ctx, rows, index, inverse):  # type: ignore[override]
        ctx.save_for_backward(inverse)
        return rows.index_select(0, index)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (inverse,) = ctx.saved_tensors
        return grad.index_select(0, inverse), None, None


class _ExpertBias(torch.autograd.Function):
    """rows + bias[expert_of_row]: a gather forward; the bias gradient is one_hot(expert)^T @ grad, one
    small matmul (fp32 accumulation) instead of an atomic scatter onto N rows."""

    @staticmethod
    def forward(ctx, rows, bias, expert_sorted):  # type: ignore[override]
        ctx.save_for_backward(expert_sorted)
        ctx.num_experts, ctx.bias_dtype = bias.shape[0], bias.dtype
        return rows + bias.to(rows.dtype).index_select(0, expert_sorted)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (expert_sorted,) = ctx.saved_tensors
        grad_bias = None
        if ctx.needs_input_grad[1]:
            experts = torch.arange(ctx.num_experts, device=grad.device)
            one_hot = (experts.unsqueeze(1) == expert_sorted.unsqueeze(0)).to(grad.dtype)  # [N, A]
            grad_bias = torch.mm(one_hot, grad).to(ctx.bias_dtype)
        return grad, grad_bias, None


def expert_bias(rows: torch.Tensor, bias: torch.Tensor, expert_sorted: torch.Tensor) -> torch.Tensor:
    return _ExpertBias.apply(rows, bias, expert_sorted)


def expert_permutation(expert_idx: torch.Tensor, num_experts: int):
    """The permutation that groups every assignment (none dropped) by expert, on the device with no host sync:
    (expert of each sorted assignment, the token of each, the sorting permutation and its inverse, int32
    offsets: the end row of each expert). Stable, so within an expert assignments keep token order."""
    num_tokens, k = expert_idx.shape
    flat = expert_idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.shape[0], device=order.device))
    counts = torch.histc(flat.float(), bins=num_experts, min=0, max=num_experts - 1)
    offsets = torch.cumsum(counts, 0).to(torch.int32)
    return flat.index_select(0, order), order // k, order, inverse, offsets


def _expert_ffn(x: torch.Tensor, experts: Experts, dtype: torch.dtype, token_sorted: torch.Tensor,
                inverse: torch.Tensor, expert_sorted: torch.Tensor, offsets: torch.Tensor, k: int) -> torch.Tensor:
    """Steps 3 and 4: every sorted assignment's row through its expert, [T*k, d] in `dtype`."""
    assert GROUPED_MM is not None
    rows = _GatherAssignments.apply(x.to(dtype), token_sorted, inverse, k)
    w1 = experts.fc1_weight.to(dtype).transpose(-2, -1)   # [N, d, H]: column-major, as the kernel wants
    w2 = experts.fc2_weight.to(dtype).transpose(-2, -1)   # [N, H, d]
    h = expert_bias(GROUPED_MM(rows, w1, offs=offsets), experts.fc1_bias, expert_sorted)
    z = GROUPED_MM(experts.drop(experts.act(h)), w2, offs=offsets)
    return expert_bias(z, experts.fc2_bias, expert_sorted)


def sync_free_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                       keep: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, d]; expert_idx, gates [T, k]; keep [T, k] bool or None. Returns [T, d] in x's dtype; the experts
    run in the autocast dtype when autocast is on. Plain autograd (double backward works through the
    grouped GEMMs; the two small functions above are once-differentiable)."""
    if GROUPED_MM is None:
        raise RuntimeError(f"the sync-free dispatch needs torch.nn.functional.grouped_mm (torch >= 2.8); this is "
                           f"torch {torch.__version__}: use dispatch='grouped' on CPU")
    num_tokens, k = expert_idx.shape
    dtype = compute_dtype(x)
    expert_sorted, token_sorted, order, inverse, offsets = expert_permutation(expert_idx, experts.num_experts)
    with torch.autocast(x.device.type, enabled=False):
        args = (x, experts, dtype, token_sorted, inverse, expert_sorted, offsets, k)
        if torch.is_grad_enabled() and not (experts.training and experts.drop.p > 0):  # step 6: recomputed
            y = checkpoint(_expert_ffn, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            y = _expert_ffn(*args)
        weights = gates if keep is None else gates * keep
        y = _Permute.apply(y, inverse, order).view(num_tokens, k, -1)
        out = (y * weights.unsqueeze(-1).to(y.dtype)).sum(1)  # (reductions accumulate in fp32)
    return out.to(x.dtype)
