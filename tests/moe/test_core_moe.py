"""MoE layer: routing, dispatch paths, capacity, auxiliary losses (GMoE §4.3, App. C)."""
import math

import pytest
import torch

from dgmoe.moe import MoEConfig, MoEMlp, aux_losses, record_routing
from dgmoe.moe import dispatch as dispatch_module
from dgmoe.moe.dispatch import capacity_keep_mask, expert_capacity
from dgmoe.moe.losses import importance_loss, load_loss
from dgmoe.moe.sync_free import sync_free_dispatch

#: the layer's dispatch options, plus the internal paths the tests hold against the mask reference
PATHS = {"grouped": None, "mask": None, "grouped_autograd": dispatch_module.sorted_autograd_dispatch,
         "padded": dispatch_module.padded_dispatch, "sync_free": sync_free_dispatch}


def make_layer(dispatch="grouped", **kw):
    torch.manual_seed(1)
    layer = MoEMlp(8, 32, MoEConfig(dispatch=dispatch if PATHS.get(dispatch) is None else "grouped", **kw))
    if PATHS.get(dispatch) is not None:
        layer._dispatch = PATHS[dispatch]
    return layer


@pytest.mark.parametrize("router", ["cosine", "linear"])
@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_each_token_gets_exactly_k_distinct_experts(router, top_k):
    layer = make_layer(router=router, top_k=top_k)
    with record_routing(layer) as rec:
        layer(torch.randn(4, 5, 8))
    ids = rec[""].expert_ids
    assert ids.shape == (4, 5, top_k)
    assert all(len(set(t.tolist())) == top_k for t in ids.reshape(-1, top_k))


@pytest.mark.parametrize("capacity_factor", [None, 0.5])
def test_sorted_dispatch_matches_mask_loop_outputs_and_gradients(capacity_factor):
    x = torch.randn(3, 7, 8, requires_grad=True)
    results = []
    for dispatch in ("grouped", "grouped_autograd", "padded", "sync_free", "mask"):
        layer = make_layer(dispatch=dispatch, capacity_factor=capacity_factor, top_k=2)
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


def _outputs_and_grads(dispatch, x, **kw):
    layer = make_layer(dispatch=dispatch, **kw).to(x.device).train()
    torch.manual_seed(5)  # same gate noise for every path
    x = x.detach().clone().requires_grad_(True)
    y = layer(x)
    (y * torch.linspace(-1, 1, y.numel(), device=x.device).view_as(y)).sum().backward()
    return y.detach(), x.grad, {n: p.grad for n, p in layer.named_parameters()}


@pytest.mark.parametrize("kw", [dict(num_experts=8, top_k=1), dict(num_experts=4, top_k=3, renormalize=False),
                                dict(num_experts=6, top_k=2, capacity_factor=1.0)])
def test_fused_grouped_dispatch_matches_autograd_in_training_with_noise_and_idle_experts(kw):
    x = torch.randn(2, 3, 8)  # 6 tokens: with 8 experts and top-1 some experts get no token
    y_ref, gx_ref, g_ref = _outputs_and_grads("mask", x, **kw)
    for dispatch in ("grouped", "grouped_autograd", "sync_free"):
        y, gx, grads = _outputs_and_grads(dispatch, x, **kw)
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(gx, gx_ref, rtol=1e-5, atol=1e-6)
        for name, g in g_ref.items():
            torch.testing.assert_close(grads[name], g, rtol=1e-5, atol=1e-6, msg=name)


def test_fused_grouped_dispatch_under_bf16_autocast_matches_autograd():
    x = torch.randn(4, 9, 8)
    results = {}
    for dispatch in ("grouped", "grouped_autograd"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results[dispatch] = _outputs_and_grads(dispatch, x)
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
    monkeypatch.setattr(dispatch, "sorted_autograd_dispatch", lambda x, *a, **k: called.append(1) or x)
    layer = make_layer(expert_dropout=0.1)
    layer.train()(torch.randn(4, 8))
    layer.eval()(torch.randn(4, 8))
    assert called == [1]
    with torch.no_grad():  # inference keeps no [T*k, hidden] buffer: the autograd path, without a graph
        make_layer()(torch.randn(4, 8))
    assert called == [1, 1]


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


def _phi(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def test_importance_and_load_losses_match_hand_computation():
    clean = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    noisy = torch.tensor([[1.2, -0.1, -0.9], [0.4, 0.7, 0.1]])
    probs = noisy.softmax(-1)
    imp = probs.sum(0).tolist()
    mean = sum(imp) / 3
    var = sum((v - mean) ** 2 for v in imp) / 3
    assert importance_loss(probs).item() == pytest.approx(var / mean**2, rel=1e-5)
    sigma, k = 1 / 3, 2
    load = [0.0, 0.0, 0.0]
    for t in range(2):
        eta = sorted(noisy[t].tolist(), reverse=True)[k - 1]
        for e in range(3):
            load[e] += 1 - _phi((eta - clean[t, e].item()) / sigma)
    mean = sum(load) / 3
    var = sum((v - mean) ** 2 for v in load) / 3
    assert load_loss(clean, noisy, k, sigma).item() == pytest.approx(var / mean**2, rel=1e-5)


@pytest.mark.parametrize("router", ["cosine", "linear"])
def test_aux_loss_has_nonzero_router_gradients(router):
    layer = make_layer(router=router)
    layer.train()
    layer(torch.randn(4, 6, 8))
    sum(aux_losses(layer).values()).backward()
    grads = [p.grad for n, p in layer.named_parameters() if n.startswith("router.")]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_noise_only_in_training_and_std_is_one_over_n():
    layer = make_layer(num_experts=4)
    assert layer.config.gate_noise_std == 0.25
    x = torch.randn(64, 8)
    layer.eval()
    r = layer.route(x)
    assert torch.equal(r.logits, r.noisy_logits)
    layer.train()
    r = layer.route(torch.randn(20000, 8))
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
        routing = layer.route(torch.randn(6, 8).bfloat16())
        assert routing.logits.dtype == torch.float32 and routing.gates.dtype == torch.float32
        assert layer(torch.randn(2, 3, 8).bfloat16()).shape == (2, 3, 8)


def test_top1_gate_is_the_softmax_probability_without_renormalisation():
    layer = make_layer(top_k=1)
    layer.eval()
    r = layer.route(torch.randn(5, 8))
    torch.testing.assert_close(r.gates[:, 0], r.probs.max(-1).values)


def test_routing_record_costs_nothing_when_off():
    layer = make_layer()
    assert layer._routing_sink is None
    with record_routing(layer):
        assert layer._routing_sink is not None
    assert layer._routing_sink is None


@pytest.mark.gpu
@pytest.mark.parametrize("dispatch", ["grouped", "grouped_autograd", "padded"])
def test_dispatch_paths_match_the_mask_loop_on_cuda(dispatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(64, 8)
    ref = _outputs_and_grads("mask", x.cuda(), num_experts=4, top_k=2)
    out = _outputs_and_grads(dispatch, x.cuda(), num_experts=4, top_k=2)
    torch.testing.assert_close(out[0], ref[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out[1], ref[1], rtol=1e-4, atol=1e-5)
    for name, g in ref[2].items():
        torch.testing.assert_close(out[2][name], g, rtol=1e-4, atol=1e-5, msg=name)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, gx, _ = _outputs_and_grads(dispatch, x.cuda(), num_experts=4, top_k=2)
    assert torch.isfinite(y).all() and gx.dtype == torch.float32
