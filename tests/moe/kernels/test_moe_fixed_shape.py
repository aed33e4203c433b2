"""The fixed-shape fp32 dispatch (`dgmoe.moe.fixed_shape`) against the mask loop: outputs and gradients,
capacity, a static slot bound, QuickGELU experts."""
import pytest
import torch
from expert_bounds import BF16_STORES, expert_roundings, rounded_double
from roundoff import assert_within_gamma

from dgmoe.moe.dispatch import capacity_keep_mask, expert_capacity, masked_dispatch
from dgmoe.moe.experts import Experts
from dgmoe.moe.fixed_shape import assignment_slots, fixed_shape_dispatch


def _case(tokens=21, dim=8, hidden=16, num_experts=4, k=2, activation="gelu", seed=0):
    torch.manual_seed(seed)
    experts = Experts(num_experts, dim, hidden, activation=activation)
    with torch.no_grad():
        experts.fc1_weight.normal_(0, 0.3), experts.fc2_weight.normal_(0, 0.3)
        experts.fc1_bias.normal_(), experts.fc2_bias.normal_()
    x = torch.randn(tokens, dim)
    idx = torch.stack([torch.randperm(num_experts)[:k] for _ in range(tokens)])
    gates = torch.rand(tokens, k)
    return experts, x, idx, gates


def _outputs_and_grads(dispatch, experts, x, idx, gates, keep=None, absolute=False, **kw):
    x, gates = x.clone().requires_grad_(True), gates.clone().requires_grad_(True)
    experts.zero_grad(set_to_none=True)
    y = dispatch(x, idx, gates, experts, keep, **kw)
    upstream = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    (y * (upstream.abs() if absolute else upstream)).sum().backward()
    return [y.detach(), x.grad, gates.grad] + [p.grad for p in experts.parameters()]


def _magnitudes(experts, x, idx, gates, keep=None):
    """The absolute model (tests/moe/kernels/roundoff.py): the mask loop in float64 on absolute values."""
    return _outputs_and_grads(masked_dispatch, rounded_double(experts, torch.float32, absolute=True), x.double().abs(),
                              idx, gates.double().abs(), keep, absolute=True)


@pytest.mark.parametrize("activation", ["gelu", "quick_gelu"])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("capacity_factor", [None, 0.5])
def test_fixed_shape_dispatch_matches_the_mask_loop(activation, k, capacity_factor):
    experts, x, idx, gates = _case(k=k, activation=activation)
    keep, slots = None, None
    if capacity_factor is not None:
        slots = expert_capacity(x.shape[0], experts.num_experts, k, capacity_factor)
        keep = capacity_keep_mask(idx, gates, experts.num_experts, slots)
        assert not keep.all()  # the case drops something
    got = _outputs_and_grads(fixed_shape_dispatch, experts, x, idx, gates, keep, slots=slots)
    ref = _outputs_and_grads(masked_dispatch, experts, x, idx, gates, keep)
    magnitude = _magnitudes(experts, x, idx, gates, keep)
    for name, a, b, m in zip(["out", "x", "gates", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"], got, ref,
                             magnitude):  # fp32 against fp32: both paths' worst cases
        assert_within_gamma(a, b, m, expert_roundings(experts, x.shape[0], k, name), name, paths=2)


def test_a_static_slot_bound_drops_what_overflows_it_like_capacity():
    """`slots` below the busiest expert's count drops the assignments ranked beyond it (in (token, choice)
    order): the same as the mask loop given a keep mask that drops exactly those."""
    experts, x, idx, gates = _case(tokens=16, k=2)
    slot = assignment_slots(idx, experts.num_experts, 5)
    keep = (slot != experts.num_experts * 5).view_as(idx)
    assert not keep.all()
    got = fixed_shape_dispatch(x, idx, gates, experts, slots=5)
    magnitude = _magnitudes(experts, x, idx, gates, keep)[0]
    assert_within_gamma(got, masked_dispatch(x, idx, gates, experts, keep), magnitude,
                        expert_roundings(experts, 16, 2, backward=False), "out", paths=2)


def test_slots_are_distinct_and_dropped_assignments_share_the_scratch_row():
    experts, x, idx, gates = _case(tokens=30, k=2)
    keep = torch.rand(idx.shape) > 0.3
    slot = assignment_slots(idx, experts.num_experts, 30, keep)
    placed = slot[keep.reshape(-1)]
    assert placed.unique().numel() == placed.numel() and (placed < experts.num_experts * 30).all()
    assert (slot[~keep.reshape(-1)] == experts.num_experts * 30).all()
    assert ((placed // 30) == idx.reshape(-1)[keep.reshape(-1)]).all()


def test_fixed_shape_dispatch_under_bf16_autocast_is_within_bf16_roundoff():
    """Under autocast the batched matmuls run in bf16 (bf16 outputs, fp32 accumulation): against the float64 mask
    loop on the bf16-rounded inputs, within the worst case of fp32 sums and bf16 stores
    (tests/moe/kernels/roundoff.py)."""
    experts, x, idx, gates = _case(tokens=21, dim=16, hidden=32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fixed_shape_dispatch(x, idx, gates, experts)
    xb = x.to(torch.bfloat16).double()
    ref = masked_dispatch(xb, idx, gates.double(), rounded_double(experts, torch.bfloat16))
    magnitude = masked_dispatch(xb.abs(), idx, gates.double(), rounded_double(experts, torch.bfloat16, absolute=True))
    n = expert_roundings(experts, 21, 2, backward=False)
    assert_within_gamma(got.detach(), ref.detach(), magnitude.detach(), n, "out", BF16_STORES, torch.bfloat16)
