"""Worst-case rounding bounds for the kernel checks (Higham, "Accuracy and Stability of Numerical Algorithms",
2nd ed., SIAM 2002, ch. 3), not statistical estimates: a check fails only where no order of operations, blocking,
FMA use or vector width can explain the difference.

The model (Higham eq. 2.4): every floating-point operation returns the exact result times 1 + delta, |delta| <= u,
u the unit roundoff (2^-24 fp32, 2^-8 bf16, 2^-11 TF32's 10-bit mantissa). Lemma 3.1: a product of n factors
(1 + delta_i)^(+-1) is 1 + theta_n, |theta_n| <= gamma_n = n u / (1 - n u) (n u < 1); Lemma 3.3:
gamma_a + gamma_b + gamma_a gamma_b <= gamma_(a+b), so the roundings along a chain of operations add their counts.
A sum of n products in any order (pairwise, blocked, vectorised, fused): |fl(x.y) - x.y| <= gamma_n |x|.|y|
(eq. 3.5). The *sum of the terms' absolute values* sets the error, not the result's size: a loss that sums
signed terms to 0.24 may be off by gamma_n times the 30 its terms add up to in absolute value.

`magnitude` is that |x|.|y| carried through a whole computation: the computation run in float64 on absolute
values (|inputs|, |weights|, each sum over |terms|, each nonlinearity by a majorant of its size and of its
Lipschitz constant, `MAJORANT`). By induction over the steps, each computed value is within gamma_n times its
absolute value of the exact one, n the count of roundings on the longest chain that reaches it (a product
of computed values: Lemma 3.3; a Lipschitz step: the mean value theorem). Where some roundings are in a coarser
dtype (bf16 stores, TF32 products) than the fp32 accumulation, the two factors compose:
(1 + gamma_n(fp32)) (1 + gamma_s(coarse)) - 1 (`gamma_mixed`). The reference runs in float64 on the same rounded
inputs, so its own rounding (u = 2^-53) is below every bound here by 8 orders of magnitude; where it runs in
fp32 instead, both sides' bounds add (`paths=2`)."""
from __future__ import annotations

import torch

#: the activations' bounds (GELU's erf form and QuickGELU x sigmoid(1.702 x)), for the absolute model: |act(z)| <= |z|,
#: |act'| <= LIPSCHITZ (max 1.1289 GELU, 1.0998 QuickGELU), |act''| <= CURVATURE (max 0.7979 GELU, 0.851 QuickGELU),
#: maxima of the float64 derivatives on a grid of 2e6 points over [-30, 30].
LIPSCHITZ, CURVATURE = 1.13, 0.86
#: the roundings of one activation or derivative evaluation, in units of u times |z| (or its derivative's size):
#: ATen's vectorised exp may be its `exp_u20` (within 20 ulp, 40 u) and its erf a polynomial (Abramowitz & Stegun
#: 7.1.26, within 1.5e-7 = 2.5 u absolute, and about 10 u more in its own evaluation); at most 6 multiplications
#: and additions around them (src/dgmoe/moe/kernels/gemm.py: `_activation`, `_activation_grad`; torch's GELU and
#: QuickGELU alike): 48.
ACTIVATION_ROUNDINGS = 48


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def gamma(n: int, dtype: torch.dtype = torch.float32) -> float:
    """Higham's gamma_n = n u / (1 - n u) (Lemma 3.1); n u < 1, else no bound exists."""
    nu = n * unit_roundoff(dtype)
    assert nu < 1, f"gamma_{n} does not exist for {dtype} (n u = {nu:.3g} >= 1): too many roundings to bound"
    return nu / (1 - nu)


def gamma_mixed(n: int, stored: int = 0, stored_dtype: torch.dtype = torch.float32) -> float:
    """n roundings in fp32 (accumulations) and `stored` in `stored_dtype` (bf16 stores, TF32 operands) on one
    chain: (1 + gamma_n) (1 + gamma_stored) - 1 (Lemma 3.3 with two unit roundoffs)."""
    return (1 + gamma(n)) * (1 + gamma(stored, stored_dtype)) - 1


def MAJORANT(z: torch.Tensor) -> torch.Tensor:  # noqa: N802 - a constant-like function of the absolute model
    """The activation in the absolute model (z >= 0 there): f(z) = LIPSCHITZ z + CURVATURE z^2 / 2. f(z~) bounds
    |act(z)| and, with ACTIVATION_ROUNDINGS, the activation's error; f'(z~) = LIPSCHITZ + CURVATURE z~ bounds
    |act'(z)| and |act'(z^) - act'(z)| <= CURVATURE |z^ - z|, so the backward's magnitudes follow by autograd."""
    return LIPSCHITZ * z + 0.5 * CURVATURE * z * z


def assert_within(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | float, name: str = "",
                  how: str = "") -> None:
    """|actual - expected| <= bound entrywise (bound broadcast to the shape); names the worst entry."""
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = (actual.double() - expected.double()).abs()
    bound = torch.as_tensor(bound, dtype=torch.float64).expand_as(err)
    ratio = err / bound.clamp_min(1e-300)
    worst = int(ratio.argmax()) if ratio.numel() else 0
    if ratio.numel() and not bool((err <= bound).all()):
        raise AssertionError(f"{name}: error {err.reshape(-1)[worst].item():.3g} > bound "
                             f"{bound.reshape(-1)[worst].item():.3g} at flat entry {worst} ({how})")


def assert_within_gamma(actual: torch.Tensor, expected: torch.Tensor, magnitude: torch.Tensor | float, n: int,
                        name: str = "", stored: int = 0, stored_dtype: torch.dtype = torch.float32,
                        paths: int = 1) -> None:
    """|actual - expected| <= paths * gamma_mixed(n, stored, stored_dtype) * magnitude entrywise: `magnitude` the
    absolute model's value of each entry (its terms' absolute values carried through, module docstring), n the
    fp32 roundings and `stored` the coarser ones on the longest chain, `paths` 2 where the reference rounds
    too (fp32 against fp32)."""
    g = paths * gamma_mixed(n, stored, stored_dtype)
    how = f"{paths} x gamma_{n} fp32" + (f" + gamma_{stored} {stored_dtype}" if stored else "") + " x |terms|"
    assert_within(actual, expected, g * torch.as_tensor(magnitude, dtype=torch.float64), name, how)
