"""The kernel checks' tolerances (roundoff.py, router_bounds.py) are worst cases that admit what fp32 rounding
can do on any CPU, yet still fail a result off by 10 times the bound or computed with a wrong term."""
import pytest
import torch
from expert_bounds import expert_roundings
from roundoff import CURVATURE, LIPSCHITZ, assert_within_gamma, gamma, unit_roundoff

pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]'): no kernels to test")
import test_kernels_experts as experts_checks  # noqa: E402
from router_bounds import balance_bound, gate_roundings, loss_bound, prob_roundings  # noqa: E402

from dgmoe.moe.dispatch import masked_dispatch  # noqa: E402
from dgmoe.moe.experts import Experts  # noqa: E402
from dgmoe.moe.kernels import expert_dispatch  # noqa: E402


def test_gamma_is_highams_and_refuses_what_has_no_bound():
    u = 2.0 ** -24
    assert gamma(1) == u / (1 - u) and gamma(44) == 44 * u / (1 - 44 * u)
    assert unit_roundoff(torch.bfloat16) == 2.0 ** -8
    with pytest.raises(AssertionError, match="no bound|does not exist"):
        gamma(256, torch.bfloat16)


@pytest.mark.parametrize("name", ["gelu", "quick_gelu"])
def test_the_activation_majorant_bounds_the_activations(name):
    """|act(z)| <= |z|, |act'| <= LIPSCHITZ, |act''| <= CURVATURE (roundoff.py), in float64 over [-30, 30]."""
    from dgmoe.moe.experts import activation_fn

    z = torch.linspace(-30, 30, 200_001, dtype=torch.float64, requires_grad=True)
    y = activation_fn(name)(z)
    (d1,) = torch.autograd.grad(y.sum(), z, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), z)
    assert (y.abs() <= z.abs() + 1e-15).all()
    assert d1.abs().max().item() <= LIPSCHITZ and d2.abs().max().item() <= CURVATURE


def test_a_cancelling_sum_is_within_gamma_though_far_outside_the_old_estimate():
    """1 + 50 terms of 0.9 u - 1, summed left to right in fp32: each small term rounds away, so the computed sum
    is 0 and the exact one 45 u. The result is tiny, its terms are not: gamma_51 times the terms' absolute sum
    (Higham eq. 3.5) admits it, where an estimate scaled by the result (6 sqrt(n) u |result|) refused it."""
    u = 2.0 ** -24
    terms = [1.0] + [0.9 * u] * 50 + [-1.0]
    computed = torch.tensor(0.0)
    for t in terms:
        computed = computed + torch.tensor(t, dtype=torch.float32)
    exact = torch.tensor(sum(terms[1:-1]), dtype=torch.float64)
    assert computed.item() == 0.0
    assert (exact - computed).abs().item() > 6 * 51 ** 0.5 * u * exact.abs().item()  # the old estimate's refusal
    assert_within_gamma(computed, exact, sum(abs(t) for t in terms), len(terms) - 1, "sum")


def _experts_case():
    experts, x, idx, gates = experts_checks._case(tokens=21, dim=24, hidden=32, num_experts=4, k=2)
    ref = experts_checks._float64_reference(experts, x, idx, gates, None, torch.float32)
    magnitude = experts_checks._magnitudes(experts, x, idx, gates, None, torch.float32)
    return experts, x, idx, gates, ref, magnitude, expert_roundings(experts, 21, 2, "out")


def test_an_expert_output_off_by_ten_times_the_bound_fails():
    experts, x, idx, gates, ref, magnitude, n = _experts_case()
    got = experts_checks._run(expert_dispatch, experts, x, idx, gates)
    assert_within_gamma(got[0], ref[0], magnitude[0], n, "out")
    wrong = got[0].clone()
    wrong[3, 5] = ref[0][3, 5] + 10 * gamma(n) * magnitude[0][3, 5]
    with pytest.raises(AssertionError, match="out: error .* > bound"):
        assert_within_gamma(wrong, ref[0], magnitude[0], n, "out")


@pytest.mark.parametrize("wrong", ["activation", "bias", "gates"])
def test_an_expert_pass_with_a_wrong_term_fails(wrong):
    """QuickGELU for GELU, fc2's bias left out, the gates not applied: each fails the worst-case bound."""
    experts, x, idx, gates, ref, magnitude, n = _experts_case()
    other = Experts(4, 24, 32, activation="quick_gelu" if wrong == "activation" else "gelu")
    other.load_state_dict(experts.state_dict())
    if wrong == "bias":
        with torch.no_grad():
            other.fc2_bias.zero_()
    got = masked_dispatch(x, idx, torch.ones_like(gates) if wrong == "gates" else gates, other)
    with pytest.raises(AssertionError, match="out: error .* > bound"):
        assert_within_gamma(got, ref[0], magnitude[0], n, "out")


def test_a_router_loss_without_its_balance_term_or_a_perturbed_probability_fails():
    from dgmoe.moe import MoEConfig, MoEMlp
    from dgmoe.moe.kernels import fused_route

    torch.manual_seed(0)
    cfg = MoEConfig(num_experts=3, top_k=1, router="cosine", router_dim=16, noise_std=0.0)
    layer = MoEMlp(24, 32, cfg).train()
    x, weights = torch.randn(37, 24), (torch.randn(37, 1), torch.randn(37, 3))
    ref = layer.router.route(x)
    got = fused_route(layer.router(x), 1, None, 0.0, cfg.renormalize)
    bound = ref.noisy_logits.abs().max().item()
    n_probs, n_gates = prob_roundings(3, bound), gate_roundings(3, 1, bound, cfg.renormalize)
    one_path = loss_bound(ref.gates, ref.probs, weights, n_gates, n_probs,
                          balance_bound(ref.probs, ref.logits, ref.noisy_logits, 1, 0.0, bound))
    terms = (got.gates * weights[0]).sum() + (got.probs * weights[1]).sum()
    reference = (ref.gates * weights[0]).sum() + (ref.probs * weights[1]).sum() + layer.router.balance_loss(ref)
    assert ((terms + got.balance_loss()) - reference).abs().item() <= 2 * one_path
    assert (terms - reference).abs().item() > 2 * one_path  # the balance term left out fails the loss check
    probs = got.probs.detach().clone()
    probs[7, 1] *= 1 + 10 * 2 * gamma(n_probs)
    with pytest.raises(AssertionError, match="probs: error"):
        assert_within_gamma(probs, ref.probs, ref.probs, n_probs, "probs", paths=2)


@pytest.mark.parametrize("wrong", ["no balance", "no load", "probability weights 1% off"])
def test_router_gradients_with_a_wrong_term_fail(wrong):
    """The fused path's loss without its balance term, without the load term, or with the probabilities'
    weights 1% off: the router's gradients fall outside the worst case of router_bounds.py."""
    from router_bounds import router_gradient_bounds
    from test_kernels_router import _grads, _losses

    from dgmoe.moe import MoEConfig, MoEMlp
    from dgmoe.moe.kernels import fused_route
    from dgmoe.moe.losses import cv_squared

    torch.manual_seed(0)
    cfg = MoEConfig(num_experts=6, top_k=2, router="cosine", router_dim=16)
    layer = MoEMlp(24, 32, cfg).train()
    x, sigma = torch.randn(37, 24), cfg.gate_noise_std
    torch.manual_seed(3)
    first = layer.router.route(x)
    noise = ((first.noisy_logits - first.logits) / sigma).detach()
    weights = (torch.randn(37, 2), torch.randn(37, 6))

    def ref(x):
        torch.manual_seed(3)
        r = layer.router.route(x)
        return r, _losses(r, layer.router.balance_loss(r), weights)

    def fused(x):
        r = fused_route(layer.router(x), 2, noise, sigma, cfg.renormalize)
        balance = {"no balance": 0.0, "no load": 0.5 * cv_squared(r.importance.unsqueeze(0)).sum()}.get(
            wrong, r.balance_loss())
        scale = 1.01 if wrong.startswith("probability") else 1.0
        return r, _losses(r, balance, (weights[0], weights[1] * scale))

    r_ref, _, g_ref = _grads(layer, x, ref)
    _, _, g_new = _grads(layer, x, fused)
    bounds = router_gradient_bounds(layer.router, x, r_ref, weights, 2, sigma, cfg.renormalize)
    assert any(((a - b).abs().double() > bound).any() for a, b, bound in zip(g_new, g_ref, bounds))


@pytest.mark.parametrize("noisy", [True, False])
def test_a_fused_balance_whose_sums_carry_no_gradient_fails_the_layer_check(monkeypatch, noisy):
    """The layer check (test_kernels_router.py) catches a fused balance loss that is right in value but sends
    no gradient back through the kernel's sums."""
    import dataclasses

    from test_kernels_router import test_the_gate_routes_through_the_fused_kernel_where_it_applies as layer_check

    import dgmoe.moe.gate as gate_module

    balance_loss = gate_module.Gate.balance_loss

    def detached(self, routing):
        if routing.sums is not None:
            routing = dataclasses.replace(routing, sums=routing.sums.detach())
        return balance_loss(self, routing)

    monkeypatch.setattr(gate_module.Gate, "balance_loss", detached)
    with pytest.raises(AssertionError, match="gradient of .* > bound"):
        layer_check(monkeypatch, noisy)
