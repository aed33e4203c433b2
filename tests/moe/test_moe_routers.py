"""Routers (dgmoe.moe.routers): top-k selection, noise, the cosine router's temperature and logits, fp32
routing under autocast, the top-1 gate (GMoE §4.3, App. C)."""

import pytest
import torch
from moe_layers import make_layer

from dgmoe.moe import record_routing


@pytest.mark.parametrize("router", ["cosine", "linear"])
@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_each_token_gets_exactly_k_distinct_experts(router, top_k):
    layer = make_layer(router=router, top_k=top_k)
    with record_routing(layer) as rec:
        layer(torch.randn(4, 5, 8))
    ids = rec[""].expert_ids
    assert ids.shape == (4, 5, top_k)
    assert all(len(set(t.tolist())) == top_k for t in ids.reshape(-1, top_k))


def test_noise_only_in_training_and_std_is_one_over_n():
    layer = make_layer(num_experts=4)
    assert layer.config.gate_noise_std == 0.25
    x = torch.randn(64, 8)
    layer.eval()
    r = layer.router.route(x)
    assert torch.equal(r.logits, r.noisy_logits)
    layer.train()
    r = layer.router.route(torch.randn(20000, 8))
    assert (r.noisy_logits - r.logits).std().item() == pytest.approx(0.25, rel=0.05)


def test_cosine_router_temperature_is_bounded_and_logits_scaled():
    layer = make_layer(router="cosine", temperature_init=0.5, temperature_min=0.01)
    assert layer.router.temperature.item() == pytest.approx(0.5)
    with torch.no_grad():
        layer.router.logit_scale.fill_(100.0)
    assert layer.router.temperature.item() == pytest.approx(0.01)
    logits = layer.router(torch.randn(5, 8))
    assert logits.abs().max().item() <= 100.0 + 1e-4  # |cos| <= 1 times 1/tau


def test_cosine_router_logits_are_the_cosine_of_projection_and_code_over_tau():
    """GMoE §4.3: s = E^T W x / (tau ||W x|| ||E||), written out the textbook way, values and gradients."""
    router = make_layer(router="cosine", temperature_init=0.3).router
    x = torch.randn(7, 8, requires_grad=True)
    logits = router(x)
    g = torch.randn_like(logits)
    grads = torch.autograd.grad((logits * g).sum(), [x, *router.parameters()])
    h = torch.nn.functional.linear(x, router.proj.weight, router.proj.bias)
    codes = router.codebook
    expected = (h / h.norm(dim=-1, keepdim=True)) @ (codes / codes.norm(dim=0, keepdim=True)) / router.temperature
    torch.testing.assert_close(logits, expected)
    for a, b in zip(grads, torch.autograd.grad((expected * g).sum(), [x, *router.parameters()])):
        torch.testing.assert_close(a, b)


def test_router_runs_in_fp32_under_autocast():
    layer = make_layer()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        routing = layer.router.route(torch.randn(6, 8).bfloat16())
        assert routing.logits.dtype == torch.float32 and routing.gates.dtype == torch.float32
        assert layer(torch.randn(2, 3, 8).bfloat16()).shape == (2, 3, 8)


def test_top1_gate_is_the_softmax_probability_without_renormalisation():
    layer = make_layer(top_k=1)
    layer.eval()
    r = layer.router.route(torch.randn(5, 8))
    torch.testing.assert_close(r.gates[:, 0], r.probs.max(-1).values)
