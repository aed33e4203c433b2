"""The fused router kernel (`dgmoe.moe.kernels.router.fused_route`) under Triton's interpreter against
`Gate.route` and `Gate.balance_loss` on the same noise: gates, expert indices, probabilities, the
balance loss, and the gradients of the input and every router parameter (cosine and linear routers, top-1,
2 and 4, with and without gate noise)."""
import pytest
import torch
from roundoff import assert_close_roundoff

from dgmoe.moe import MoEConfig, MoEMlp

pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]'): no kernels to test")
from dgmoe.moe.kernels import fused_route  # noqa: E402


def _losses(routing, balance, weights):
    w_gates, w_probs = weights
    return (routing.gates * w_gates).sum() + (routing.probs * w_probs).sum() + balance


def _grads(layer, x, fn):
    layer.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    routing, loss = fn(x)
    loss.backward()
    return routing, loss.detach(), [x.grad] + [p.grad for p in layer.router.parameters()]


@pytest.mark.parametrize("router,top_k,num_experts,noisy", [
    ("cosine", 2, 6, True), ("linear", 1, 4, True), ("linear", 2, 6, False), ("cosine", 4, 8, True),
    ("cosine", 1, 3, False)])
def test_fused_route_matches_route_and_balance_loss(router, top_k, num_experts, noisy):
    torch.manual_seed(0)
    cfg = MoEConfig(num_experts=num_experts, top_k=top_k, router=router, router_dim=16,
                    noise_std=None if noisy else 0.0)
    layer = MoEMlp(24, 32, cfg).train()
    x = torch.randn(37, 24)  # 37 rows: the last block of 16 is partial
    sigma = cfg.gate_noise_std
    torch.manual_seed(3)
    reference = layer.router.route(x)
    noise = ((reference.noisy_logits - reference.logits) / sigma).detach() if noisy else None
    weights = (torch.randn(37, top_k), torch.randn(37, num_experts))

    def ref(x):
        torch.manual_seed(3)
        r = layer.router.route(x)
        return r, _losses(r, layer.router.balance_loss(r), weights)

    def fused(x):
        r = fused_route(layer.router(x), top_k, noise, sigma if noisy else 0.0, cfg.renormalize)
        return r, _losses(r, r.balance_loss(), weights)

    r_ref, loss_ref, g_ref = _grads(layer, x, ref)
    r_new, loss_new, g_new = _grads(layer, x, fused)
    assert torch.equal(r_new.expert_idx, r_ref.expert_idx)
    depth = num_experts + 4  # a softmax over N experts, the renormalisation, the noise
    assert_close_roundoff(r_new.gates, r_ref.gates, torch.float32, depth, "gates")
    assert_close_roundoff(r_new.probs, r_ref.probs, torch.float32, depth, "probs")
    assert_close_roundoff(loss_new, loss_ref, torch.float32, depth + 37, "loss")  # sums over 37 tokens
    names = ["x"] + [n for n, _ in layer.router.named_parameters()]
    for name, a, b in zip(names, g_new, g_ref):
        assert_close_roundoff(a, b, torch.float32, depth + 37 + 24, name)


def test_fused_route_rejects_a_k_it_does_not_unroll():
    with pytest.raises(ValueError, match="top_k"):
        fused_route(torch.randn(4, 3), 4)


@pytest.mark.parametrize("noisy", [True, False])
def test_the_gate_routes_through_the_fused_kernel_where_it_applies(monkeypatch, noisy):
    """`Gate.route` with `fused_router_applies` true (eager CUDA with triton; forced here on the interpreter) makes
    the decision the torch ops make on the same per-sample draws, and its balance loss comes from the kernel's
    sums (`Routing.sums`) within rounding of the torch terms; a whole layer's output and gradients follow."""
    import dgmoe.moe.gate as gate_module

    torch.manual_seed(0)
    cfg = MoEConfig(num_experts=6, top_k=2, router="cosine", router_dim=16, noise_std=None if noisy else 0.0)
    layer = MoEMlp(24, 32, cfg).train()
    x = torch.randn(2, 19, 24)

    def run(fused: bool):
        monkeypatch.setattr(gate_module, "fused_router_applies", lambda *a: fused)
        layer.zero_grad(set_to_none=True)
        layer.clear_aux()
        xx = x.clone().requires_grad_(True)
        torch.manual_seed(5)
        routing = layer.router.route(xx.reshape(-1, 24), (2, 19))
        assert (routing.sums is not None) == fused
        balance = layer.router.balance_loss(routing)
        torch.manual_seed(5)
        out = layer(xx)
        (out.square().sum() + layer.aux_losses()["balance"]).backward()
        return routing, balance.detach(), out.detach(), [xx.grad] + [p.grad for p in layer.parameters()]

    ref, fused = run(False), run(True)
    assert torch.equal(fused[0].expert_idx, ref[0].expert_idx)
    assert_close_roundoff(fused[1], ref[1], torch.float32, 6 + 4 + 38, "balance")
    assert_close_roundoff(fused[2], ref[2], torch.float32, 6 + 4 + 32, "layer output")
    for i, (a, b) in enumerate(zip(fused[3], ref[3])):
        if b is not None:
            assert_close_roundoff(a, b, torch.float32, 6 + 4 + 38 + 32, f"gradient {i}")
