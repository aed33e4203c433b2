"""The dropless grouped expert FFN as one autograd function: gather, per-expert FFN, gate, scatter.

    out[t] = sum_{(t, e) kept} g_{t,e} * (W2_e GELU(W1_e x_t + b1_e) + b2_e)        (GMoE eq. 3)

Why a hand-written backward instead of autograd over the per-expert ops:
- memory: it keeps, per assignment, only the expert's pre-activation `W1 x + b1` and its output (for the
  gate's gradient); GELU is recomputed in backward, so the saved [T*k, hidden] activations are as many as
  a dense FFN keeps for T*k tokens (its fc1 output and GELU output: [T, hidden] twice for k=2), and the
  gathered inputs are not kept (the layer input `x` is alive anyway). Autograd over the same ops keeps
  the GELU output and the gathered inputs too: GMoE-S/16 training peaks at 1.06x ViT-S/16 at batch 96
  with this function (docs/benchmarks.md, section 5);
- time: each expert's rows are gathered just before use, expert outputs and all gradients are written
  into preallocated buffers (no concatenation of expert outputs, no stacking of per-expert weight
  gradients); measured at parity with the autograd path on CPU despite the GELU recompute.
Double backward is not supported (`once_differentiable` raises); `dgmoe.moe.dispatch.sorted_autograd_dispatch`
is the same computation through plain autograd, which "grouped" uses for that case and for expert dropout.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from dgmoe.moe.experts import compute_dtype


class GroupedExpertFFN(torch.autograd.Function):
    """out = GroupedExpertFFN.apply(x, tokens, gates, counts, w1, b1, w2, b2).

    x [T, d]; tokens [A] the token of each assignment, grouped by expert; gates [A] their combine weights;
    counts: assignments per expert (python ints summing to A); w1 [N, H, d], b1 [N, H], w2 [N, d, H],
    b2 [N, d]. Returns [T, d] in x's dtype; the FFN runs in the autocast dtype when autocast is on.
    """

    @staticmethod
    def forward(ctx, x, tokens, gates, counts, w1, b1, w2, b2):
        dtype = compute_dtype(x)
        w1c, b1c, w2c, b2c = (w.to(dtype) for w in (w1, b1, w2, b2))
        with torch.autocast(x.device.type, enabled=False):
            xc, gc = x.to(dtype), gates.to(dtype).unsqueeze(1)
            pre = xc.new_empty(tokens.shape[0], w1.shape[1])
            y = xc.new_empty(tokens.shape[0], w2.shape[1])
            gated = torch.empty_like(y)
            for e, rows in _expert_rows(counts):
                tok = tokens[rows]
                torch.addmm(b1c[e], xc.index_select(0, tok), w1c[e].t(), out=pre[rows])
                torch.addmm(b2c[e], F.gelu(pre[rows]), w2c[e].t(), out=y[rows])
                torch.mul(y[rows], gc[rows], out=gated[rows])
            out = torch.zeros_like(x).index_add_(0, tokens, gated.to(x.dtype))
        ctx.counts, ctx.dtype = list(counts), dtype
        ctx.param_dtypes = [w.dtype for w in (w1, b1, w2, b2)]
        ctx.save_for_backward(x, tokens, gates, pre, y, w1c, w2c)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x, tokens, gates, pre, y, w1c, w2c = ctx.saved_tensors
        dtype, counts = ctx.dtype, ctx.counts
        num_experts, hidden, dim = w1c.shape
        xc, gc, grad_out = x.to(dtype), gates.to(dtype).unsqueeze(1), grad_out.to(dtype)
        grad_gates = gates.new_empty(gates.shape) if ctx.needs_input_grad[2] else None
        grad_xs = xc.new_empty(tokens.shape[0], dim) if ctx.needs_input_grad[0] else None
        grad_w1, grad_w2 = w1c.new_zeros(w1c.shape), w2c.new_zeros(w2c.shape)
        grad_b1, grad_b2 = w1c.new_zeros(num_experts, hidden), w2c.new_zeros(num_experts, dim)
        for e, rows in _expert_rows(counts):
            tok, pre_e = tokens[rows], pre[rows]
            g = grad_out.index_select(0, tok)
            if grad_gates is not None:
                grad_gates[rows] = torch.linalg.vecdot(g, y[rows])
            g.mul_(gc[rows])
            torch.sum(g, 0, out=grad_b2[e])
            torch.mm(g.t(), F.gelu(pre_e), out=grad_w2[e])
            grad_pre = torch.ops.aten.gelu_backward(torch.mm(g, w2c[e]), pre_e)
            torch.sum(grad_pre, 0, out=grad_b1[e])
            torch.mm(grad_pre.t(), xc.index_select(0, tok), out=grad_w1[e])
            if grad_xs is not None:
                torch.mm(grad_pre, w1c[e], out=grad_xs[rows])
        grad_x = None if grad_xs is None else torch.zeros_like(x).index_add_(0, tokens, grad_xs.to(x.dtype))
        grads = [t.to(d) for t, d in zip((grad_w1, grad_b1, grad_w2, grad_b2), ctx.param_dtypes)]
        return (grad_x, None, grad_gates, None, *grads)


def _expert_rows(counts: list[int]):
    """(expert, slice of its rows) for every expert with at least one assignment."""
    start = 0
    for e, n in enumerate(counts):
        if n:
            yield e, slice(start, start + n)
            start += n
