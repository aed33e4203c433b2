"""Worst-case bounds for a whole MoE layer routed by the fused kernel or by torch's ops (tests/moe/kernels/
roundoff.py's model, Higham ch. 3): the experts' outputs y are the same on both paths (the same ops on the same
rows), so the layer's output out = sum_k g_k y_k differs by the gates' errors times |y| and each path's combine;
the loss sum(out^2) + balance sends d gates = dout . y to the router (`router_bounds.router_gradient_bounds`, with
the errors of dout and y's products as w_g's) and (gates, dout) back through the experts, a backward bilinear in
them with the experts' absolute model as its majorant (`expert_bounds`)."""
from __future__ import annotations

import torch
from expert_bounds import expert_roundings, rounded_double
from roundoff import gamma
from router_bounds import gate_roundings, router_gradient_bounds

U32 = 2.0 ** -24


def _assignment_outputs(experts, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """[T, k, d]: each assignment's expert output on its token (float64 experts)."""
    out = x.new_zeros(*idx.shape, experts.dim)
    for e in range(experts.num_experts):
        where = idx == e
        if where.any():
            out[where] = experts.expert(e, x[where.nonzero()[:, 0]])
    return out


def _absolute_backward(experts_abs, x_abs, idx, gates, upstream) -> dict[str, torch.Tensor]:
    x_abs, gates = x_abs.clone().requires_grad_(True), gates.clone().requires_grad_(True)
    experts_abs.zero_grad(set_to_none=True)
    y = _assignment_outputs(experts_abs, x_abs, idx)
    ((y * gates.unsqueeze(-1)).sum(1) * upstream).sum().backward()
    return {"x": x_abs.grad, **{f"experts.{n}": p.grad for n, p in experts_abs.named_parameters()}}


def layer_bounds(layer, tokens: torch.Tensor, routing, sigma: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(the bound of the output's difference [T, d], of each gradient's: "x" and `layer.named_parameters`'
    names) between the fused and the torch path, for the loss out.square().sum() + balance of the layer's
    routed tokens [T, d] and the torch path's `routing`."""
    cfg, experts = layer.config, layer.experts
    idx, g = routing.expert_idx, routing.gates.detach().double()
    k = idx.shape[1]
    bound = routing.noisy_logits.abs().max().item()
    n_g = gate_roundings(cfg.num_experts, k, bound, cfg.renormalize)
    x = tokens.detach().double()
    y = _assignment_outputs(rounded_double(experts, torch.float32), x, idx).detach()
    experts_abs = rounded_double(experts, torch.float32, absolute=True)
    y_abs = _assignment_outputs(experts_abs, x.abs(), idx).detach()  # >= |y| (roundoff.MAJORANT)
    out_abs = (g.unsqueeze(-1) * y_abs).sum(1)
    out_err = gamma(n_g + k + 1) * out_abs  # one path: the gates' relative error, the combine's k + 1
    out = (g.unsqueeze(-1) * y).sum(1)
    dout, dout_err = 2 * out.abs() + 2 * out_err, 2 * out_err + gamma(1) * 2 * out.abs()
    # d gates = dout . y over d: w_g's error on one path, its size as w_g (an upper bound is all the bound uses)
    dim = tokens.shape[-1]
    w_err = (dout_err.unsqueeze(1) * y_abs).sum(-1) + gamma(dim + 2) * (dout.unsqueeze(1) * y_abs).sum(-1)
    w_g = (dout.unsqueeze(1) * y_abs).sum(-1) + w_err
    no_prob_weights = torch.zeros_like(routing.probs, dtype=torch.float64)
    router = router_gradient_bounds(layer.router, tokens, routing, (w_g, no_prob_weights), k, sigma, cfg.renormalize,
                                    w_err)
    names = ["x"] + [f"router.{n}" for n, _ in layer.router.named_parameters()]
    bounds = dict(zip(names, router))
    # the experts' backward: bilinear in (gates, dout) >= 0 in the absolute model, so the majorant at the
    # inflated pair minus the one at the nominal pair bounds the propagated difference; plus each path's rounding
    nominal = _absolute_backward(experts_abs, x.abs(), idx, g, dout)
    inflated = _absolute_backward(experts_abs, x.abs(), idx, g * (1 + 2 * gamma(n_g)), dout + 2 * dout_err)
    rows = tokens.shape[0]
    for name, value in inflated.items():
        n = expert_roundings(experts, rows, k, name.removeprefix("experts."))
        extra = (value - nominal[name]) + 2 * gamma(n) * value
        bounds[name] = bounds.get(name, 0) + extra
    return 2 * out_err, bounds
