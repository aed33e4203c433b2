"""The fused grouped dispatch (dgmoe.moe.fused) against autograd: training, noise, idle experts, bf16, double
backward, and when the layer falls back to the autograd path."""

import pytest
import torch
from moe_layers import make_layer, outputs_and_grads


@pytest.mark.parametrize("kw", [dict(num_experts=8, top_k=1), dict(num_experts=4, top_k=3, renormalize=False),
                                dict(num_experts=6, top_k=2, capacity_factor=1.0)])
def test_fused_grouped_dispatch_matches_autograd_in_training_with_noise_and_idle_experts(kw):
    x = torch.randn(2, 3, 8)  # 6 tokens: with 8 experts and top-1 some experts get no token
    y_ref, gx_ref, g_ref = outputs_and_grads("mask", x, **kw)
    for dispatch in ("grouped", "grouped_autograd", "sync_free"):
        y, gx, grads = outputs_and_grads(dispatch, x, **kw)
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(gx, gx_ref, rtol=1e-5, atol=1e-6)
        for name, g in g_ref.items():
            torch.testing.assert_close(grads[name], g, rtol=1e-5, atol=1e-6, msg=name)


def test_fused_grouped_dispatch_under_bf16_autocast_matches_autograd():
    x = torch.randn(4, 9, 8)
    results = {}
    for dispatch in ("grouped", "grouped_autograd"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results[dispatch] = outputs_and_grads(dispatch, x)
    (y, gx, grads), (y_ref, gx_ref, g_ref) = results["grouped"], results["grouped_autograd"]
    assert y.dtype == y_ref.dtype and gx.dtype == gx_ref.dtype == torch.float32
    torch.testing.assert_close(y, y_ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(gx, gx_ref, rtol=2e-2, atol=2e-2)
    for name, g in g_ref.items():
        assert grads[name].dtype == torch.float32
        torch.testing.assert_close(grads[name], g, rtol=5e-2, atol=5e-2, msg=name)


def test_fused_grouped_dispatch_refuses_double_backward_and_autograd_path_supports_it():
    x = torch.randn(5, 8, requires_grad=True)
    (g,) = torch.autograd.grad(make_layer(dispatch="grouped_autograd")(x).pow(2).sum(), x, create_graph=True)
    g.sum().backward()
    (g,) = torch.autograd.grad(make_layer(dispatch="grouped")(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward|once_differentiable|twice"):
        g.sum().backward()


def test_grouped_dispatch_uses_the_autograd_path_for_expert_dropout_and_inference(monkeypatch):
    from dgmoe.moe import dispatch

    called = []
    monkeypatch.setitem(dispatch.PATHS, "sorted_autograd", lambda x, *a, **k: called.append(1) or x)
    layer = make_layer(expert_dropout=0.1)
    layer.train()(torch.randn(4, 8))
    layer.eval()(torch.randn(4, 8))
    assert called == [1]
    with torch.no_grad():  # inference keeps no [T*k, hidden] buffer: the autograd path, without a graph
        make_layer()(torch.randn(4, 8))
    assert called == [1, 1]
