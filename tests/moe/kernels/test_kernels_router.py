"""The fused router kernel (`dgmoe.moe.kernels.router.fused_route`) under Triton's interpreter against
`Gate.route` and `Gate.balance_loss` on the same noise: gates, expert indices, probabilities, the
balance loss, and the gradients of the input and every router parameter (cosine and linear routers, top-1,
2 and 4, with and without gate noise)."""
import pytest
import torch
from layer_bounds import layer_bounds
from roundoff import assert_within, assert_within_gamma
from router_bounds import balance_bound, gate_roundings, loss_bound, prob_roundings, router_gradient_bounds

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
    # worst cases of both fp32 paths (tests/moe/kernels/router_bounds.py): probabilities and gates relative
    bound = r_ref.noisy_logits.abs().max().item()
    n_probs, n_gates = prob_roundings(num_experts, bound), gate_roundings(num_experts, top_k, bound, cfg.renormalize)
    assert_within_gamma(r_new.probs, r_ref.probs, r_ref.probs, n_probs, "probs", paths=2)
    assert_within_gamma(r_new.gates, r_ref.gates, r_ref.gates, n_gates, "gates", paths=2)
    balance = balance_bound(r_ref.probs, r_ref.logits, r_ref.noisy_logits, top_k, sigma if noisy else 0.0, bound)
    one_path = loss_bound(r_ref.gates, r_ref.probs, weights, n_gates, n_probs, balance)
    assert_within(loss_new, loss_ref, 2 * one_path, "loss", "2 x worst case of one fp32 path")
    # the gradients: J^T d_logits with J the router's (the same ops on both paths), d_logits the kernel's or
    # autograd's: |J|^T (both paths' d_logits errors) + both paths' roundings of J^T (gamma_n |J|^T |d_logits|)
    bounds = router_gradient_bounds(layer.router, x, r_ref, weights, top_k, sigma if noisy else 0.0, cfg.renormalize)
    names = ["x"] + [n for n, _ in layer.router.named_parameters()]
    for name, a, b, limit in zip(names, g_new, g_ref, bounds):
        assert_within(a, b, limit, name, "worst case: router_bounds.py")


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
        grads = {"x": xx.grad, **{n: p.grad for n, p in layer.named_parameters()}}
        return routing, balance.detach(), out.detach(), grads

    ref, fused = run(False), run(True)
    assert torch.equal(fused[0].expert_idx, ref[0].expert_idx)
    bound = ref[0].noisy_logits.abs().max().item()
    sigma = cfg.gate_noise_std if noisy else 0.0
    one_path = balance_bound(ref[0].probs, ref[0].logits, ref[0].noisy_logits, 2, sigma, bound)
    assert_within(fused[1], ref[1], 2 * one_path, "balance", "2 x worst case of one fp32 path")
    out_bound, bounds = layer_bounds(layer, x.reshape(-1, 24), ref[0], sigma)
    assert_within(fused[2], ref[2], out_bound.view_as(ref[2]), "layer output", "worst case: layer_bounds.py")
    for name, b in ref[3].items():
        if b is not None:
            assert_within(fused[3][name], b, bounds[name].view_as(b), f"gradient of {name}",
                          "worst case: layer_bounds.py")
