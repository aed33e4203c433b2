"""The experts of a sparse layer as four fused grouped-GEMM kernels forward and backward (`gemm.py`), with
the dispatch signature of `dgmoe.moe.dispatch.masked_dispatch` and no host reads:

    out[t] = sum_{j < k} keep_{t,j} g_{t,j} (W2_e act(W1_e x_t + b1_e) + b2_e),  e = expert_idx[t, j]   (GMoE eq. 3)

Forward, over the A = T*k assignments sorted by expert on the device (`sorted_assignments`):
1. gather-GEMM: z1 = x[token] @ W1_e^T + b1_e, a1 = act(z1) (rows gathered in the prologue; bias and
   activation in the epilogue; z1 kept for the backward, which recomputes a1 from it as it loads it);
2. GEMM-scatter: y = a1 @ W2_e^T + b2_e (kept for the gate gradient), times the gate, written to the
   assignment's (token, choice) row; then the sum over the k choices (a reduction: no atomics).
Backward: grad a1 -> grad z1 as a gather-GEMM of the output gradient with W2_e, gate and act'(z1) in its
epilogue; grad x as a GEMM-scatter of grad z1 with W1_e and the sum over k; the weight and bias gradients
per expert from `grouped_weight_grad` (each expert's segment, no atomics); the gate gradient as the dot of
the output gradient with y. Everything accumulates in fp32, so the results do not depend on the launch order.

The kernels compute in the autocast dtype when autocast is on (bf16), else in x's dtype; fp32 multiplies
in IEEE fp32 unless `allow_tf32=True`. Expert dropout is not fused (the torch paths implement it).
"""
from __future__ import annotations

import torch
import triton

from dgmoe.moe.experts import Experts, compute_dtype
from dgmoe.moe.kernels.gemm import ACT_CODES, ACT_NONE, grouped_rows, grouped_weight_grad
from dgmoe.moe.sync_free import sorted_assignments


def _upcast(device: torch.device) -> bool:
    """16-bit tiles are multiplied in fp32 off the GPU (`gemm.py`: the interpreter's bf16 dot is wrong)."""
    return device.type != "cuda"


def _blocks(device: torch.device) -> tuple[int, int, int]:
    """(rows, columns, reduction) per program: small tiles under the interpreter, where they only cost time."""
    return (16, 16, 16) if device.type != "cuda" else (64, 64, 32)


def _rows(x, src, expert_sorted, w, strides, cols, *, bias=None, scale=None, z=None, pre=None, out_index=None,
          act=ACT_NONE, act_grad=ACT_NONE, out_dtype=None, precision="ieee"):
    """One `grouped_rows` launch; `strides` = (per expert, per reduction index, per output column) of w."""
    num_rows, reduce_dim = src.shape[0] if src is not None else x.shape[0], x.shape[1]
    out = torch.empty(num_rows, cols, device=x.device, dtype=out_dtype or x.dtype)
    pre_out = torch.empty(num_rows, cols, device=x.device, dtype=x.dtype) if pre else out
    bm, bn, bk = _blocks(x.device)
    grid = (triton.cdiv(num_rows, bm), triton.cdiv(cols, bn))
    grouped_rows[grid](x, src if src is not None else expert_sorted, expert_sorted, w,
                       bias if bias is not None else w, scale if scale is not None else w, z if z is not None else w,
                       pre_out, out, out_index if out_index is not None else expert_sorted,
                       num_rows, reduce_dim, cols, x.stride(0), *strides,
                       GATHER=src is not None, SCATTER=out_index is not None, HAS_BIAS=bias is not None,
                       HAS_SCALE=scale is not None, STORE_PRE=bool(pre), ACT=act, ACT_GRAD=act_grad,
                       PRECISION=precision, UPCAST=_upcast(x.device), BM=bm, BN=bn, BK=bk)
    return (out, pre_out) if pre else out


def _weight_grad(left, right, token_sorted, offsets, num_experts, *, gather_left=False, gather_right=False,
                 scale=None, with_bias=True, act_right=ACT_NONE, precision="ieee"):
    """(dW [N, P, Q] = per expert left^T right, db [N, P] = per expert sum of left's rows), fp32."""
    p, q = left.shape[1], right.shape[1]
    dw = torch.empty(num_experts, p, q, device=left.device, dtype=torch.float32)
    db = torch.empty(num_experts, p, device=left.device, dtype=torch.float32)
    bm, bn, bk = _blocks(left.device)
    grid = (num_experts, triton.cdiv(p, bm), triton.cdiv(q, bn))
    grouped_weight_grad[grid](left, right, token_sorted, scale if scale is not None else left, offsets, dw, db, p, q,
                              GATHER_L=gather_left, GATHER_R=gather_right, HAS_SCALE=scale is not None,
                              HAS_DB=with_bias, ACT_R=act_right, PRECISION=precision, UPCAST=_upcast(left.device),
                              BP=bm, BQ=bn, BR=bk)
    return dw, db


class _FusedExperts(torch.autograd.Function):
    """(x [T, d], weights [T*k] in (token, choice) order, w1 [N, H, d], b1 [N, H], w2 [N, d, H], b2 [N, d]) ->
    [T, d]; the routing tensors are fixed inputs without gradients."""

    @staticmethod
    def forward(ctx, x, weights, w1, b1, w2, b2, routing, act, precision):  # type: ignore[override]
        expert_sorted, token_sorted, order, inverse, offsets = routing
        num_tokens, dim = x.shape
        k = order.shape[0] // num_tokens
        hidden = w1.shape[1]
        gate_sorted = weights.float().index_select(0, order)
        a1, z1 = _rows(x, token_sorted, expert_sorted, w1, (hidden * dim, 1, dim), hidden, bias=b1, pre=True,
                       act=act, precision=precision)
        out_k, y = _rows(a1, None, expert_sorted, w2, (dim * hidden, 1, hidden), dim, bias=b2, scale=gate_sorted,
                         pre=True, out_index=order, out_dtype=torch.float32, precision=precision)
        ctx.save_for_backward(x, w1, w2, gate_sorted, z1, y, *routing)  # a1 = act(z1) is recomputed as loaded
        ctx.act, ctx.precision, ctx.k, ctx.gate_dtype = act, precision, k, weights.dtype
        return out_k.view(num_tokens, k, dim).sum(1).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        x, w1, w2, gate_sorted, z1, y, expert_sorted, token_sorted, order, inverse, offsets = ctx.saved_tensors
        num_experts, hidden, dim = w1.shape
        num_tokens, k, precision = x.shape[0], ctx.k, ctx.precision
        g = grad.to(x.dtype).contiguous()
        need_x, need_gate, need_w1, need_b1, need_w2, need_b2 = ctx.needs_input_grad[:6]
        dx = dgate = dw1 = db1 = dw2 = db2 = None
        if need_x or need_w1 or need_b1:
            gz1 = _rows(g, token_sorted, expert_sorted, w2, (dim * hidden, hidden, 1), hidden, scale=gate_sorted,
                        z=z1, act_grad=ctx.act, precision=precision)
            if need_x:
                dx = _rows(gz1, None, expert_sorted, w1, (hidden * dim, dim, 1), dim, out_index=order,
                           out_dtype=torch.float32, precision=precision).view(num_tokens, k, dim).sum(1).to(x.dtype)
            if need_w1 or need_b1:
                dw1, db1 = _weight_grad(gz1, x, token_sorted, offsets, num_experts, gather_right=True,
                                        precision=precision)
                dw1, db1 = dw1.to(w1.dtype), db1.to(w1.dtype)
        if need_w2 or need_b2:
            dw2, db2 = _weight_grad(g, z1, token_sorted, offsets, num_experts, gather_left=True, scale=gate_sorted,
                                    act_right=ctx.act, precision=precision)
            dw2, db2 = dw2.to(w2.dtype), db2.to(w2.dtype)
        if need_gate:
            dgate = (g.index_select(0, token_sorted).float() * y.float()).sum(-1).index_select(0, inverse)
            dgate = dgate.to(ctx.gate_dtype)
        return dx, dgate, dw1, db1, dw2, db2, None, None, None

def expert_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                    keep: torch.Tensor | None = None, allow_tf32: bool = False) -> torch.Tensor:
    """x [T, d]; expert_idx, gates [T, k]; keep [T, k] bool or None. Returns [T, d] in x's dtype (the
    signature of `masked_dispatch`). `allow_tf32`: fp32 products in TF32 (only where the caller asks)."""
    if not isinstance(experts, Experts):
        raise TypeError(f"the Triton dispatch runs GMoE's FFN experts (Experts), not {type(experts).__name__}")
    if experts.activation not in ACT_CODES:
        raise ValueError(f"the Triton dispatch fuses {sorted(ACT_CODES)}, not activation {experts.activation!r}")
    if experts.training and experts.drop.p > 0:
        raise NotImplementedError("the Triton dispatch does not fuse expert dropout; use dispatch='grouped'")
    dtype = compute_dtype(x)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"the Triton dispatch computes in fp32, bf16 or fp16, not {dtype}")
    precision = "tf32" if allow_tf32 and dtype == torch.float32 else "ieee"
    routing = sorted_assignments(expert_idx, experts.num_experts)
    weights = (gates if keep is None else gates * keep).reshape(-1)
    with torch.autocast(x.device.type, enabled=False):
        params = [p.to(dtype).contiguous() for p in
                  (experts.fc1_weight, experts.fc1_bias, experts.fc2_weight, experts.fc2_bias)]
        out = _FusedExperts.apply(x.to(dtype).contiguous(), weights, *params, tuple(r.contiguous() for r in routing),
                                  ACT_CODES[experts.activation], precision)
    return out.to(x.dtype)
