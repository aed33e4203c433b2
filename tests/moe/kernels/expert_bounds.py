"""The absolute model of an expert pass (tests/moe/kernels/roundoff.py): float64 copies of the experts, and the
counts of roundings on an expert pass's longest chains."""
from __future__ import annotations

import copy

import torch
from roundoff import ACTIVATION_ROUNDINGS, MAJORANT

from dgmoe.moe.experts import Experts

#: bf16 roundings on one chain of a bf16 expert pass: the Triton kernels (src/dgmoe/moe/kernels/experts.py) store
#: the pre-activation, the activation and the output sum forward, the upstream gradient, the hidden gradient, the
#: gate-scaled left operand, the recomputed activation and the input gradient's sum backward (8); the fixed-shape
#: dispatch under autocast rounds each baddbmm's output, the activation, the gates, their products and the sum
#: over k (5 + k). Counted as 10 for both (k <= 2).
BF16_STORES = 10


def rounded_double(experts: Experts, dtype: torch.dtype, absolute: bool = False) -> Experts:
    """A float64 copy of `experts` with its weights rounded to `dtype`; `absolute`: their absolute values and the
    activation by `MAJORANT` (the absolute model)."""
    ref = copy.deepcopy(experts)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.to(dtype).float())
            if absolute:
                p.abs_()
    ref = ref.double()
    if absolute:
        ref.act = MAJORANT
    return ref


def expert_roundings(experts: Experts, tokens: int, k: int, name: str = "out", backward: bool = True) -> int:
    """fp32 roundings on the longest chain to `name` ("out", or a gradient: "x", "gates", "fc1_weight", ...):
    forward, the fc1 sums over dim, its bias, the activation, the fc2 sums over hidden, its bias, the gate scale,
    the sum over k (dim + hidden + k + 3 + ACTIVATION_ROUNDINGS); `backward` the same again (the activation's
    derivative for the activation) and the upstream gradient's 3 (torch.linspace, the product); the weight
    gradients' sums over the tokens' rows."""
    one_pass = experts.dim + experts.hidden + k + 3 + ACTIVATION_ROUNDINGS
    if not backward:
        return one_pass
    return 2 * one_pass + 3 + (tokens if name.startswith("fc") else 0)
