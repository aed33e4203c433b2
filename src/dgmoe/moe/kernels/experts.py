"""The experts of a sparse layer as four fused grouped-GEMM kernels forward and backward (`gemm.py`), with
the dispatch signature of `dgmoe.moe.dispatch.masked_dispatch` and no host reads:

    out[t] = sum_{j < k} keep_{t,j} g_{t,j} (W2_e act(W1_e x_t + b1_e) + b2_e),  e = expert_idx[t, j]   (GMoE eq. 3)

Forward, over the A = T*k assignments sorted by expert on the device (`expert_permutation`):
1. gather-GEMM: z1 = x[token] @ W1_e^T + b1_e, a1 = act(z1) (rows gathered in the prologue; bias and
   activation in the epilogue; z1 kept for the backward, which recomputes a1 from it as it loads it);
2. GEMM-scatter: y = a1 @ W2_e^T + b2_e (kept for the gate gradient), times the gate, written to the
   assignment's (token, choice) row; then the sum over the k choices (a reduction: no atomics).
Backward: grad a1 -> grad z1 as a gather-GEMM of the output gradient with W2_e, gate and act'(z1) in its
epilogue; grad x as a GEMM-scatter of grad z1 with W1_e and the sum over k; the weight and bias gradients
per expert from `grouped_weight_grad` (each expert's segment, no atomics); the gate gradient as the dot of
the output gradient with y. Everything accumulates in fp32, so the results do not depend on the launch order.

The kernels compute in the autocast dtype when autocast is on (bf16), else in x's dtype; fp32 multiplies
in IEEE fp32 unless `allow_tf32=True` (or None: as torch's CUDA fp32 matmuls may now, read by the operators
when they run, so that a compiled graph follows the switch without tracing it). Expert dropout is not fused
(the torch paths implement it). The tiles are autotuned per shape on a GPU, or fixed (`tiles.py`).

The forward and the backward are custom operators (`torch.library.custom_op`: `dgmoe::triton_experts`,
`dgmoe::triton_experts_backward`) with fake implementations (the output shapes, for tracing) and a registered
autograd formula: torch.compile captures each as one node of its graph (no graph break, no fallback), the
routing's sort and the gate gradient around them traced as torch operations.
"""
from __future__ import annotations

import torch
import triton
from torch import Tensor

from dgmoe.devices import tf32_matmuls
from dgmoe.moe.experts import Experts, compute_dtype
from dgmoe.moe.kernels.gemm import ACT_CODES, ACT_NONE, grouped_rows, grouped_weight_grad
from dgmoe.moe.kernels.tiles import TILES, fixed_tile, grouped_rows_tuned, grouped_weight_grad_tuned
from dgmoe.moe.sync_free import expert_permutation


def _upcast(device: torch.device) -> bool:
    """16-bit tiles are multiplied in fp32 off the GPU (`gemm.py`: the interpreter's bf16 dot is wrong)."""
    return device.type != "cuda"


def _rows(x, src, expert_sorted, w, strides, cols, *, tiles, bias=None, scale=None, z=None, pre=None,
          out_index=None, act=ACT_NONE, act_grad=ACT_NONE, out_dtype=None, precision="ieee"):
    """One `grouped_rows` launch; `strides` = (per expert, per reduction index, per output column) of w."""
    num_rows, reduce_dim = src.shape[0] if src is not None else x.shape[0], x.shape[1]
    out = torch.empty(num_rows, cols, device=x.device, dtype=out_dtype or x.dtype)
    pre_out = torch.empty(num_rows, cols, device=x.device, dtype=x.dtype) if pre else out
    args = (x, src if src is not None else expert_sorted, expert_sorted, w, bias if bias is not None else w,
            scale if scale is not None else w, z if z is not None else w, pre_out, out,
            out_index if out_index is not None else expert_sorted, num_rows, reduce_dim, cols, x.stride(0), *strides)
    flags = dict(GATHER=src is not None, SCATTER=out_index is not None, HAS_BIAS=bias is not None,
                 HAS_SCALE=scale is not None, STORE_PRE=bool(pre), ACT=act, ACT_GRAD=act_grad, PRECISION=precision,
                 UPCAST=_upcast(x.device))
    if tiles == "autotune":
        grouped_rows_tuned[lambda meta: (triton.cdiv(num_rows, meta["BM"]), triton.cdiv(cols, meta["BN"]))](
            *args, **flags)
    else:
        bm, bn, bk = fixed_tile()
        grouped_rows[(triton.cdiv(num_rows, bm), triton.cdiv(cols, bn))](*args, **flags, BM=bm, BN=bn, BK=bk)
    return (out, pre_out) if pre else out


def _weight_grad(left, right, token_sorted, offsets, num_experts, *, tiles, gather_left=False, gather_right=False,
                 scale=None, with_bias=True, act_right=ACT_NONE, precision="ieee"):
    """(dW [N, P, Q] = per expert left^T right, db [N, P] = per expert sum of left's rows), fp32."""
    p, q = left.shape[1], right.shape[1]
    dw = torch.empty(num_experts, p, q, device=left.device, dtype=torch.float32)
    db = torch.empty(num_experts, p, device=left.device, dtype=torch.float32)
    args = (left, right, token_sorted, scale if scale is not None else left, offsets, dw, db, p, q,
            token_sorted.shape[0])
    flags = dict(GATHER_L=gather_left, GATHER_R=gather_right, HAS_SCALE=scale is not None, HAS_DB=with_bias,
                 ACT_R=act_right, PRECISION=precision, UPCAST=_upcast(left.device))
    if tiles == "autotune":
        grouped_weight_grad_tuned[lambda meta: (num_experts, triton.cdiv(p, meta["BP"]), triton.cdiv(q, meta["BQ"]))](
            *args, **flags)
    else:
        bm, bn, bk = fixed_tile()
        grouped_weight_grad[(num_experts, triton.cdiv(p, bm), triton.cdiv(q, bn))](*args, **flags, BP=bm, BQ=bn,
                                                                                    BR=bk)
    return dw, db


#: the precision that follows torch's switch for CUDA fp32 matmuls, read when the operators run
FOLLOW = "follow"


def _precision(precision: str) -> str:
    """'ieee' or 'tf32' for the kernels' `tl.dot`; FOLLOW resolved now (`dgmoe.devices.tf32_matmuls`)."""
    return ("tf32" if tf32_matmuls() else "ieee") if precision == FOLLOW else precision


# ----- the experts as custom operators (torch.compile captures them: no graph break) ----------------------------
@torch.library.custom_op("dgmoe::triton_experts", mutates_args=())
def triton_experts(x: Tensor, weights: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor,
                   expert_sorted: Tensor, token_sorted: Tensor, order: Tensor, inverse: Tensor, offsets: Tensor,
                   act: int, precision: str, tiles: str) -> tuple[Tensor, Tensor, Tensor]:
    """(x [T, d], weights [T*k] in (token, choice) order, w1 [N, H, d], b1 [N, H], w2 [N, d, H], b2 [N, d], the
    sorted routing of `expert_permutation`, whose inverse and offsets the backward reads) -> (out [T, d],
    z1 [T*k, H] the pre-activations, y [T*k, d] the ungated expert outputs), the last two kept for the
    backward."""
    num_tokens, dim = x.shape
    hidden, precision = w1.shape[1], _precision(precision)
    gate_sorted = weights.float().index_select(0, order)
    a1, z1 = _rows(x, token_sorted, expert_sorted, w1, (hidden * dim, 1, dim), hidden, bias=b1, pre=True,
                   act=act, precision=precision, tiles=tiles)
    out_k, y = _rows(a1, None, expert_sorted, w2, (dim * hidden, 1, hidden), dim, bias=b2, scale=gate_sorted,
                     pre=True, out_index=order, out_dtype=torch.float32, precision=precision, tiles=tiles)
    return out_k.view(num_tokens, -1, dim).sum(1).to(x.dtype), z1, y


@triton_experts.register_fake
def _(x, weights, w1, b1, w2, b2, expert_sorted, token_sorted, order, inverse, offsets, act, precision, tiles):
    assignments = order.shape[0]
    return x.new_empty(x.shape), x.new_empty(assignments, w1.shape[1]), x.new_empty(assignments, x.shape[1])


@torch.library.custom_op("dgmoe::triton_experts_backward", mutates_args=())
def triton_experts_backward(grad: Tensor, x: Tensor, weights: Tensor, w1: Tensor, w2: Tensor, z1: Tensor,
                            expert_sorted: Tensor, token_sorted: Tensor, order: Tensor, offsets: Tensor, act: int,
                            precision: str, tiles: str, need_x: bool, need_w1: bool,
                            need_w2: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dx, dw1, db1, dw2, db2) in the inputs' dtypes; an empty tensor for each one not needed. grad [T, d] is the
    output's gradient in x's dtype."""
    num_experts, hidden, dim = w1.shape
    num_tokens, precision = x.shape[0], _precision(precision)
    gate_sorted = weights.float().index_select(0, order)
    dx, dw1, db1, dw2, db2 = (x.new_empty(0) for _ in range(5))  # distinct: outputs of an operator never alias
    if need_x or need_w1:
        gz1 = _rows(grad, token_sorted, expert_sorted, w2, (dim * hidden, hidden, 1), hidden, scale=gate_sorted,
                    z=z1, act_grad=act, precision=precision, tiles=tiles)
        if need_x:
            dx = _rows(gz1, None, expert_sorted, w1, (hidden * dim, dim, 1), dim, out_index=order,
                       out_dtype=torch.float32, precision=precision, tiles=tiles)
            dx = dx.view(num_tokens, -1, dim).sum(1).to(x.dtype)
        if need_w1:
            dw1, db1 = _weight_grad(gz1, x, token_sorted, offsets, num_experts, gather_right=True,
                                    precision=precision, tiles=tiles)
            dw1, db1 = dw1.to(w1.dtype), db1.to(w1.dtype)
    if need_w2:
        dw2, db2 = _weight_grad(grad, z1, token_sorted, offsets, num_experts, gather_left=True, scale=gate_sorted,
                                act_right=act, precision=precision, tiles=tiles)
        dw2, db2 = dw2.to(w2.dtype), db2.to(w2.dtype)
    return dx, dw1, db1, dw2, db2


@triton_experts_backward.register_fake
def _(grad, x, weights, w1, w2, z1, expert_sorted, token_sorted, order, offsets, act, precision, tiles, need_x,
      need_w1, need_w2):
    num_experts, hidden, dim = w1.shape
    return (x.new_empty(x.shape if need_x else 0), w1.new_empty(w1.shape if need_w1 else 0),
            w1.new_empty((num_experts, hidden) if need_w1 else 0), w2.new_empty(w2.shape if need_w2 else 0),
            w2.new_empty((num_experts, dim) if need_w2 else 0))


def _setup_context(ctx, inputs, output) -> None:
    x, weights, w1, _b1, w2, _b2, expert_sorted, token_sorted, order, inverse, offsets, act, precision, tiles = inputs
    _out, z1, y = output
    ctx.save_for_backward(x, weights, w1, w2, z1, y, expert_sorted, token_sorted, order, inverse, offsets)
    ctx.config = (act, precision, tiles)
    ctx.set_materialize_grads(False)  # z1 and y are outputs for the backward only: no zero gradients made for them


def _backward(ctx, grad, _grad_z1, _grad_y):
    """The kernels' backward for x and the weights; the gate gradient, the dot of the output gradient with each
    assignment's y, in torch (what torch.compile traces around the operator)."""
    if grad is None:  # the output was not used
        return (None,) * 14
    x, weights, w1, w2, z1, y, expert_sorted, token_sorted, order, inverse, offsets = ctx.saved_tensors
    act, precision, tiles = ctx.config
    need_x, need_gate, need_w1, need_b1, need_w2, need_b2 = ctx.needs_input_grad[:6]
    g = grad.to(x.dtype).contiguous()
    dx, dw1, db1, dw2, db2 = triton_experts_backward(g, x, weights, w1, w2, z1, expert_sorted, token_sorted, order,
                                                     offsets, act, precision, tiles, need_x, need_w1 or need_b1,
                                                     need_w2 or need_b2)
    dgate = None
    if need_gate:
        dgate = (g.index_select(0, token_sorted).float() * y.float()).sum(-1).index_select(0, inverse)
        dgate = dgate.to(weights.dtype)
    return (dx if need_x else None, dgate, dw1 if need_w1 else None, db1 if need_b1 else None,
            dw2 if need_w2 else None, db2 if need_b2 else None) + (None,) * 8


triton_experts.register_autograd(_backward, setup_context=_setup_context)


def expert_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                    keep: torch.Tensor | None = None, allow_tf32: bool | None = False,
                    tiles: str = "autotune") -> torch.Tensor:
    """x [T, d]; expert_idx, gates [T, k]; keep [T, k] bool or None. Returns [T, d] in x's dtype (the
    signature of `masked_dispatch`). `allow_tf32`: fp32 products in TF32 (only where the caller asks); None: where
    `dgmoe.devices.tf32_matmuls` says so when the kernels run (the forward and the backward each read it).
    `tiles`: "autotune" or "fixed" (`dgmoe.moe.kernels.tiles`)."""
    if not isinstance(experts, Experts):
        raise TypeError(f"the Triton dispatch runs GMoE's FFN experts (Experts), not {type(experts).__name__}")
    if experts.activation not in ACT_CODES:
        raise ValueError(f"the Triton dispatch fuses {sorted(ACT_CODES)}, not activation {experts.activation!r}")
    if experts.training and experts.drop.p > 0:
        raise NotImplementedError("the Triton dispatch does not fuse expert dropout; use dispatch='grouped'")
    dtype = compute_dtype(x)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"the Triton dispatch computes in fp32, bf16 or fp16, not {dtype}")
    precision = "ieee" if dtype != torch.float32 or allow_tf32 is False else "tf32" if allow_tf32 else FOLLOW
    if tiles not in TILES:
        raise ValueError(f"tiles must be one of {TILES}, not {tiles!r}")
    routing = [r.contiguous() for r in expert_permutation(expert_idx, experts.num_experts)]
    weights = (gates if keep is None else gates * keep).reshape(-1)
    with torch.autocast(x.device.type, enabled=False):
        params = [p.to(dtype).contiguous() for p in
                  (experts.fc1_weight, experts.fc1_bias, experts.fc2_weight, experts.fc2_bias)]
        out, _z1, _y = triton_experts(x.to(dtype).contiguous(), weights.contiguous(), *params, *routing,
                                      ACT_CODES[experts.activation], precision, tiles)
    return out.to(x.dtype)
