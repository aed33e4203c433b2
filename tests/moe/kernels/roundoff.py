"""Tolerances from the unit roundoff, not guessed: a sum of n rounded products deviates from the exact one
by at most about lambda sqrt(n) u times the sum of the terms' magnitudes, with probability at least
1 - 2n exp(-lambda^2 / 2) (Higham & Mary 2019, "A new approach to probabilistic rounding error analysis",
SIAM J. Sci. Comput. 41(5)); lambda = 6 makes that failure probability about 3e-6 at a depth of 100 (the
deepest here), and the bound is a worst case over rounding signs besides. The
reference runs in float64 on the same (rounded) inputs, so only the kernels' roundings count; `n` is the
longest chain of roundings one output passes through (the reduction depths of the GEMMs it depends on, plus
one per stored intermediate), and the reference's largest entry stands in for the terms' magnitudes (the
expert cases draw weights of variance 1 / fan-in, so the terms and the results have the same scale)."""
from __future__ import annotations

import math

import torch

LAMBDA = 6.0


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def assert_close_roundoff(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, depth: int,
                          name: str = "") -> None:
    """|actual - expected| <= lambda sqrt(depth) u(dtype) max|expected| entrywise (expected in float64)."""
    scale = expected.abs().max().item() or 1.0
    atol = LAMBDA * math.sqrt(depth) * unit_roundoff(dtype) * scale
    err = (actual.double() - expected.double()).abs().max().item()
    assert err <= atol, f"{name}: max error {err:.3g} > {atol:.3g} (depth {depth}, {dtype}, scale {scale:.3g})"
