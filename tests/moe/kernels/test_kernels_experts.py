"""The Triton experts (`dgmoe.moe.kernels.experts`: gather-GEMM, GEMM-scatter and their backward kernels)
under Triton's interpreter against the mask loop in float64: outputs and the gradients of x, the gates and
every expert weight and bias, fp32 and bf16, top-1 and top-2, capacity, QuickGELU experts, experts with no
rows and row blocks that straddle two experts."""
import pytest
import torch
from expert_bounds import BF16_STORES, expert_roundings, rounded_double
from roundoff import assert_within_gamma

from dgmoe.moe.dispatch import capacity_keep_mask, expert_capacity, masked_dispatch
from dgmoe.moe.experts import Experts

pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]'): no kernels to test")
from dgmoe.moe.kernels import expert_dispatch  # noqa: E402

NAMES = ["out", "x", "gates", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"]


def _case(tokens, dim, hidden, num_experts, k, activation="gelu", used=None, seed=0):
    torch.manual_seed(seed)
    experts = Experts(num_experts, dim, hidden, activation=activation)
    with torch.no_grad():
        experts.fc1_weight.normal_(0, dim ** -0.5), experts.fc2_weight.normal_(0, hidden ** -0.5)
        experts.fc1_bias.normal_(), experts.fc2_bias.normal_()
    pool = used if used is not None else list(range(num_experts))
    idx = torch.stack([torch.tensor(pool)[torch.randperm(len(pool))[:k]] for _ in range(tokens)])
    return experts, torch.randn(tokens, dim), idx, torch.rand(tokens, k)


def _upstream(y: torch.Tensor) -> torch.Tensor:
    return torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)


def _run(dispatch, experts, x, idx, gates, keep=None, autocast=None, upstream=_upstream, **kw):
    x, gates = x.clone().requires_grad_(True), gates.clone().requires_grad_(True)
    experts.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
        y = dispatch(x, idx, gates, experts, keep, **kw)
    (y * upstream(y)).sum().backward()
    return [y.detach(), x.grad, gates.grad] + [p.grad for p in experts.parameters()]


def _float64_reference(experts, x, idx, gates, keep, dtype):
    """The mask loop in float64 on the inputs and weights rounded to the kernels' compute dtype."""
    return _run(masked_dispatch, rounded_double(experts, dtype), x.to(dtype).double(), idx, gates.double(), keep)


def _magnitudes(experts, x, idx, gates, keep, dtype):
    """The absolute model (tests/moe/kernels/roundoff.py) of every output and gradient: the mask loop in float64
    on |x|, |gates|, |weights| and the |upstream gradient|, the activation by its majorant."""
    return _run(masked_dispatch, rounded_double(experts, dtype, absolute=True), x.to(dtype).double().abs(), idx,
                gates.double().abs(), keep, upstream=lambda y: _upstream(y).abs())


def _check(experts, x, idx, gates, keep=None, dtype=torch.float32, **kw):
    got = _run(expert_dispatch, experts, x, idx, gates, keep, autocast=dtype if dtype != torch.float32 else None,
               **kw)
    ref = _float64_reference(experts, x, idx, gates, keep, dtype)
    magnitude = _magnitudes(experts, x, idx, gates, keep, dtype)
    tokens, k = idx.shape
    stored = BF16_STORES if dtype == torch.bfloat16 else 0
    for name, a, b, m in zip(NAMES, got, ref, magnitude):
        assert a.dtype == (gates.dtype if name == "gates" else torch.float32)
        assert_within_gamma(a, b, m, expert_roundings(experts, tokens, k, name), name, stored, torch.bfloat16)
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k", [1, 2])
def test_triton_experts_match_the_mask_loop(dtype, k):
    _check(*_case(tokens=21, dim=24, hidden=32, num_experts=4, k=k), dtype=dtype)


def test_triton_quick_gelu_experts_with_capacity():
    experts, x, idx, gates = _case(tokens=27, dim=16, hidden=32, num_experts=3, k=2, activation="quick_gelu")
    keep = capacity_keep_mask(idx, gates, 3, expert_capacity(27, 3, 2, 0.5))
    assert not keep.all()
    grads = _check(experts, x, idx, gates, keep)
    assert (grads[2][~keep] == 0).all()  # a dropped assignment's gate gets no gradient


def test_experts_without_rows_get_zero_gradients_and_blocks_may_straddle_experts():
    """Experts 1 and 3 receive nothing; 40 assignments in blocks of 16 rows put expert boundaries inside
    blocks (rows 0-15 | 16-31 | 32-39)."""
    experts, x, idx, gates = _case(tokens=20, dim=16, hidden=16, num_experts=4, k=2, used=[0, 2])
    grads = _check(experts, x, idx, gates)
    for g in grads[3:]:
        assert (g[[1, 3]] == 0).all() and (g[[0, 2]] != 0).any()


def test_only_the_gradients_asked_for_are_computed():
    """Frozen experts (e.g. PEFT) get no gradients; the input's and the gates' are unchanged."""
    experts, x, idx, gates = _case(tokens=21, dim=16, hidden=16, num_experts=3, k=2)
    full = _run(expert_dispatch, experts, x, idx, gates)
    experts.requires_grad_(False)
    frozen = _run(expert_dispatch, experts, x, idx, gates)
    assert all(g is None for g in frozen[3:])
    torch.testing.assert_close(frozen[1], full[1], rtol=0, atol=0)
    torch.testing.assert_close(frozen[2], full[2], rtol=0, atol=0)


def test_tf32_only_where_asked():
    """allow_tf32 passes TF32 to the fp32 products (on a GPU: operands rounded to 10-bit mantissas, unit
    roundoff 2^-11, 2 per product, 2 GEMMs on the forward chain); the output stays within that worst case of
    the float64 reference (the interpreter multiplies in fp32)."""
    experts, x, idx, gates = _case(tokens=16, dim=16, hidden=16, num_experts=2, k=1)
    got = _run(expert_dispatch, experts, x, idx, gates, allow_tf32=True)
    ref = _float64_reference(experts, x, idx, gates, None, torch.float32)
    magnitude = _magnitudes(experts, x, idx, gates, None, torch.float32)
    assert_within_gamma(got[0], ref[0], magnitude[0], expert_roundings(experts, 16, 1, "out"), "out", 4, torch.float16)


def test_triton_dispatch_rejects_what_it_does_not_fuse():
    experts, x, idx, gates = _case(tokens=4, dim=16, hidden=16, num_experts=2, k=1)
    experts.drop.p = 0.5
    with pytest.raises(NotImplementedError, match="expert dropout"):
        expert_dispatch(x, idx, gates, experts.train())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_experts_at_a_larger_size(dtype):
    _check(*_case(tokens=200, dim=64, hidden=96, num_experts=6, k=2), dtype=dtype)
