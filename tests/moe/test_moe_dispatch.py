"""Dispatch paths and capacity (dgmoe.moe.dispatch): every path against the mask loop, token dropping at
capacity (GMoE App. C)."""

import pytest
import torch
from moe_layers import make_layer, outputs_and_grads

from dgmoe.moe import record_routing
from dgmoe.moe.dispatch import capacity_keep_mask, expert_capacity


@pytest.mark.parametrize("activation", ["gelu", "quick_gelu"])
@pytest.mark.parametrize("capacity_factor", [None, 0.5])
def test_sorted_dispatch_matches_mask_loop_outputs_and_gradients(capacity_factor, activation):
    x = torch.randn(3, 7, 8, requires_grad=True)
    results = []
    for dispatch in ("grouped", "grouped_autograd", "fixed_shape", "sync_free", "mask"):
        layer = make_layer(dispatch=dispatch, capacity_factor=capacity_factor, top_k=2, activation=activation)
        layer.eval()
        x.grad = None
        y = layer(x)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        grads = [p.grad.clone() for p in layer.parameters()]
        results.append((y.detach(), x.grad.clone(), grads))
    y_ref, gx_ref, g_ref = results[-1]  # the boolean-mask reference
    for y, gx, grads in results[:-1]:
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(gx, gx_ref, rtol=1e-5, atol=1e-6)
        for a, b in zip(grads, g_ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_huge_capacity_equals_dropless():
    x = torch.randn(2, 9, 8)
    dropless, capped = make_layer(), make_layer(capacity_factor=1000.0)
    dropless.eval(), capped.eval()
    torch.testing.assert_close(dropless(x), capped(x))


def test_small_capacity_drops_tokens_and_respects_slots():
    idx = torch.tensor([[0], [0], [0], [1]])
    gates = torch.tensor([[0.5], [0.9], [0.7], [0.6]])
    keep = capacity_keep_mask(idx, gates, num_experts=2, capacity=2, batch_prioritized=True)
    # expert 0 has three candidates for 2 slots: the least confident (token 0, gate 0.5) is dropped
    assert keep.squeeze(1).tolist() == [False, True, True, True]
    keep = capacity_keep_mask(idx, gates, num_experts=2, capacity=2, batch_prioritized=False)
    assert keep.squeeze(1).tolist() == [True, True, False, True]
    assert expert_capacity(18912, 6, 1, 1.5) == 4728  # the official configuration's example


def test_dropped_token_gets_zero_moe_output():
    layer = make_layer(capacity_factor=0.1, top_k=1)
    layer.eval()
    x = torch.randn(1, 20, 8)
    with record_routing(layer) as rec:
        y = layer(x)
    dropped = rec[""].gates[0, :, 0] == 0
    assert dropped.any()
    assert torch.all(y[0, dropped] == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dispatch", ["grouped", "grouped_autograd", "fixed_shape"])
def test_dispatch_paths_match_the_mask_loop_on_cuda(dispatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(64, 8)
    ref = outputs_and_grads("mask", x.cuda(), num_experts=4, top_k=2)
    out = outputs_and_grads(dispatch, x.cuda(), num_experts=4, top_k=2)
    torch.testing.assert_close(out[0], ref[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out[1], ref[1], rtol=1e-4, atol=1e-5)
    for name, g in ref[2].items():
        torch.testing.assert_close(out[2][name], g, rtol=1e-4, atol=1e-5, msg=name)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, gx, _ = outputs_and_grads(dispatch, x.cuda(), num_experts=4, top_k=2)
    assert torch.isfinite(y).all() and gx.dtype == torch.float32


def test_quick_gelu_experts_compute_x_sigmoid_1702x():
    """OpenAI CLIP's activation (x * sigmoid(1.702 x)) in every expert, not GELU."""
    layer = make_layer(activation="quick_gelu")
    x = torch.randn(5, 8)
    e = layer.experts
    h = x @ e.fc1_weight[0].T + e.fc1_bias[0]
    expected = (h * torch.sigmoid(1.702 * h)) @ e.fc2_weight[0].T + e.fc2_bias[0]
    torch.testing.assert_close(e.expert(0, x), expected)
    assert (e.expert(0, x) - make_layer().experts.expert(0, x)).abs().max() > 0
