"""Worst-case rounding bounds of the router's outputs (tests/moe/kernels/roundoff.py's model, Higham ch. 3), each
for one fp32 path (torch's ops or the fused kernel); a check of one against the other allows the two paths' sum.

Softmax of one row of N noisy logits n = l + sigma * noise, |n| <= B: n's 2 roundings, the max's and the
subtraction's put the exponent within 6 u B of exact, so exp is within a relative 6 u B + 40 u (exp itself
within 20 ulp: ATen's vectorised `exp_u20`); the sum of N positive terms adds gamma_(N-1), the division u. A
probability's relative error is at most gamma_(N + 84 + 12 B): twice an exponential's (its own and the sum's)
plus the sum and division. Renormalised top-k gates divide k of those by their sum: twice again, plus
gamma_(k+1).

Load P(expert stays in the top k) = 1 - (1 + erf((t - l) / sigma / sqrt 2)) / 2, t the k-th largest noisy
logit: t - l is within 4 u B, times the slope phi / sigma <= 0.4 / sigma, and the evaluation within 20 u
absolute (ATen's vectorised erf within 1.5e-7 = 2.5 u plus about 10 u of its own evaluation, the divisions'
relative 2 u times z phi(z) <= 0.25, the additions'): u (1.6 B / sigma + 20) absolute per entry.
The balance loss 0.5 (cv^2(I) + cv^2(L)) of the sums over T tokens: first order in the sums' errors through
its float64 gradient, plus cv^2's own evaluation (two means of N terms, the subtraction, the squares, the
division: gamma_(4N + 8) times 2 (cv^2 + 1))."""
from __future__ import annotations

import math

import torch
from roundoff import gamma

from dgmoe.moe.losses import cv_squared, load_probabilities

U32 = 2.0 ** -24


def prob_roundings(num_experts: int, bound: float) -> int:
    """gamma's n for a probability (relative): N + 84 + 12 B, B the largest |noisy logit|."""
    return num_experts + 84 + math.ceil(12 * bound)


def gate_roundings(num_experts: int, top_k: int, bound: float, renormalize: bool) -> int:
    n = prob_roundings(num_experts, bound)
    return 2 * n + top_k + 1 if renormalize and top_k > 1 else n


def balance_bound(probs: torch.Tensor, logits: torch.Tensor, noisy: torch.Tensor, top_k: int, sigma: float,
                  bound: float) -> float:
    """One fp32 path's worst error of 0.5 (cv^2(importance) + cv^2(load)) (load only with sigma > 0), from the
    float64 probabilities, clean and noisy logits [T, N]."""
    tokens, num_experts = probs.shape
    sums = [probs.double().sum(0)]
    errors = [gamma(prob_roundings(num_experts, bound) + tokens) * sums[0]]  # positive terms: relative
    if sigma > 0:
        load = load_probabilities(logits.double(), noisy.double(), top_k, sigma).sum(0)
        sums.append(load)
        errors.append(tokens * U32 * (1.6 * bound / sigma + 20) + gamma(tokens) * load)
    total = 0.0
    for s, e in zip(sums, errors):
        s = s.clone().requires_grad_(True)
        cv = cv_squared(s.unsqueeze(0).double()).double().squeeze()
        (grad,) = torch.autograd.grad(cv, s)
        total += 0.5 * ((grad.abs() * e).sum().item() + gamma(4 * num_experts + 8) * 2 * (cv.item() + 1))
    return total


def loss_bound(gates: torch.Tensor, probs: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor],
               n_gates: int, n_probs: int, balance: float) -> float:
    """One path's worst error of sum(gates * w_g) + sum(probs * w_p) + balance: each sum's terms' absolute values
    times the terms' relative error and the sum's gamma (Higham eq. 3.5), the balance's bound, 2 additions."""
    w_g, w_p = (w.double().abs() for w in weights)
    g_term = (gates.double().abs() * w_g).sum().item()
    p_term = (probs.double().abs() * w_p).sum().item()
    return (gamma(n_gates + 1 + gates.numel() + 2) * g_term + gamma(n_probs + 1 + probs.numel() + 2) * p_term
            + (1 + gamma(2)) * balance)


def _cv_gradient(sums: torch.Tensor, errors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """0.5 d cv^2 / d sums in float64 and one fp32 path's worst error of it: first order in the sums' errors
    through cv^2's float64 Hessian (doubled), plus its own evaluation (gamma_(4N + 12) times the absolute values
    of its terms 2 (|S - m| + S + m) / (N m^2) + 2 (var + m^2) / (N m^3))."""
    n = sums.numel()
    s = sums.detach().double().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(cv_squared(s.unsqueeze(0).double()).double().sum(), s, create_graph=True)
    hessian = torch.stack([torch.autograd.grad(grad[i], s, retain_graph=True)[0] for i in range(n)])
    m, var = s.detach().mean(), s.detach().var(unbiased=False)
    terms = 2 * ((s.detach() - m).abs() + s.detach() + m) / (n * m * m) + 2 * (var + m * m) / (n * m ** 3)
    error = 2 * hessian.abs() @ errors + gamma(4 * n + 12) * terms
    return 0.5 * grad.detach(), 0.5 * error


def logit_gradient_bound(routing, weights: tuple[torch.Tensor, torch.Tensor], top_k: int, sigma: float,
                         renormalize: bool, gate_weight_errors: torch.Tensor | float = 0.0
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """d loss / d logits of sum(gates w_g) + sum(probs w_p) + balance (the router test's loss), from a routing's
    float64 values: (its absolute model |terms| [T, N], one fp32 path's worst error [T, N]). The backward is
    `route_backward`'s and autograd's alike: dp = w_p + d_imp (+ the gates' (w_g - sum w_g g) / s on the top-k),
    ds = p (dp - sum p dp) + d_load phi(z) / sigma (minus their row sum at the k-th noisy logit).
    `gate_weight_errors` [T, k]: how far each path's w_g may be from the exact one (0: the same on both)."""
    p, logits, noisy = (t.detach().double() for t in (routing.probs, routing.logits, routing.noisy_logits))
    w_g, w_p = (w.double() for w in weights)
    gates, idx = routing.gates.detach().double(), routing.expert_idx
    tokens, num_experts = p.shape
    bound = noisy.abs().max().item()
    n_p = prob_roundings(num_experts, bound)
    n_g = gate_roundings(num_experts, top_k, bound, renormalize)
    d_imp, e_imp = _cv_gradient(p.sum(0), gamma(n_p + tokens) * p.sum(0))
    a = w_p.abs() + d_imp.abs()  # |dp|'s absolute model
    err_dp = gamma(n_g + top_k + 4) * w_p.abs() + e_imp  # w_p is exact: only d_imp and the gates' part err
    renorm = renormalize and top_k > 1
    total = p.gather(1, idx).sum(1, keepdim=True) if renorm else torch.ones(tokens, 1, dtype=torch.float64)
    dg = (w_g.abs() + ((w_g.abs() * gates).sum(1, keepdim=True) if renorm else 0)) / total
    w_err = torch.as_tensor(gate_weight_errors, dtype=torch.float64).expand_as(w_g)
    dg_err = (w_err + ((w_err * gates).sum(1, keepdim=True) if renorm else 0)) / total
    a = a.scatter_add(1, idx, dg)
    err_dp = err_dp.scatter_add(1, idx, gamma(n_g + top_k + 4) * dg + dg_err)
    magnitude = p * (a + (p * a).sum(1, keepdim=True))
    error = gamma(n_p + num_experts + 3) * magnitude + p * (err_dp + (p * err_dp).sum(1, keepdim=True))
    if sigma > 0:
        threshold = noisy.topk(top_k, dim=-1)
        z = (threshold.values[:, -1:] - logits) / sigma
        load = 1.0 - 0.5 * (1 + torch.erf(z / math.sqrt(2)))
        load_error = tokens * U32 * (1.6 * bound / sigma + 20) + gamma(tokens) * load.sum(0)
        d_load, e_load = _cv_gradient(load.sum(0), load_error)
        phi = torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        flow = d_load.abs() * phi / sigma
        # phi(z) / sigma: exp within 20 ulp and 5 products (gamma_48), z within u (4 B / sigma + 2 |z|), and
        # |phi'| = |z| phi <= 0.25
        flow_err = (gamma(48) * flow + e_load * phi / sigma
                    + d_load.abs() / sigma * 0.25 * U32 * (4 * bound / sigma + 2 * z.abs()))
        kth = threshold.indices[:, -1:]
        magnitude = magnitude + flow
        magnitude = magnitude.scatter_add(1, kth, flow.sum(1, keepdim=True))
        error = error + flow_err
        kth_error = flow_err.sum(1, keepdim=True) + gamma(num_experts) * flow.sum(1, keepdim=True)
        error = error.scatter_add(1, kth, kth_error)
    return magnitude, error


def router_backward_majorant(router, x: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
    """|J|^T v for v >= 0 [T, N], J the router's Jacobian (logits by its input and parameters, in
    `named_parameters` order after x), as the product of its steps' absolute Jacobians in float64: it bounds
    |J^T (a - b)| by the majorant of |a - b|, and, times gamma_n, the rounding of either path's backward."""
    x = x.detach().double()
    params = {n: p.detach().double() for n, p in router.named_parameters()}
    if "codebook" not in params:  # linear: logits = x W^T
        w = params["proj.weight"]
        return [v @ w.abs(), v.t() @ x.abs()]  # x, proj.weight
    h = x @ params["proj.weight"].t() + params["proj.bias"]
    norm = h.norm(dim=-1, keepdim=True)
    col = params["codebook"].norm(dim=0, keepdim=True)
    codes = params["codebook"] / col
    scale = params["logit_scale"].exp()
    q = h @ codes
    dq = v * scale / norm
    dr = (v * q.abs()).sum(1, keepdim=True)
    dh = dq @ codes.abs().t() + scale * dr / norm ** 2 * h.abs() / norm
    dcodes = h.abs().t() @ dq
    d_codebook = (dcodes + codes.abs() * (codes.abs() * dcodes).sum(0, keepdim=True)) / col
    d_scale = scale * (dr / norm).sum().reshape(())
    grads = {"codebook": d_codebook, "logit_scale": d_scale, "proj.weight": dh.t() @ x.abs(), "proj.bias": dh.sum(0)}
    return [dh @ params["proj.weight"].abs()] + [grads[name] for name in params]


def router_roundings(router, tokens: int, num_experts: int, dim: int) -> int:
    """The fp32 roundings on a router backward's longest chain: the sums over the experts, the router's width,
    the input's and the tokens, and the dozen products and divisions around them."""
    width = router.codebook.shape[0] if hasattr(router, "codebook") else 0
    return num_experts + width + dim + tokens + 12


def router_gradient_bounds(router, x: torch.Tensor, routing, weights: tuple[torch.Tensor, torch.Tensor], top_k: int,
                           sigma: float, renormalize: bool, gate_weight_errors: torch.Tensor | float = 0.0
                           ) -> list[torch.Tensor]:
    """How far the gradients of x and of the router's parameters (`named_parameters` order) may differ between
    the fused and the torch path for the loss sum(gates w_g) + sum(probs w_p) + balance: the router's backward J^T
    (the same ops on both) of d_logits that differ by at most both paths' errors, |J|^T (2 error), plus either
    path's rounding of J^T, gamma_n |J|^T |d_logits|."""
    magnitude, error = logit_gradient_bound(routing, weights, top_k, sigma, renormalize, gate_weight_errors)
    tokens, num_experts = routing.probs.shape
    n = router_roundings(router, tokens, num_experts, x.shape[-1])
    spread = router_backward_majorant(router, x, 2 * error)
    rounding = router_backward_majorant(router, x, magnitude + 2 * error)
    return [(1 + gamma(n)) * e + 2 * gamma(n) * r for e, r in zip(spread, rounding)]
