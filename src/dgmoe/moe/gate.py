"""The gate of a sparse layer: which experts each routed unit goes to, with which weights (the `Routing`).

    GMoE eq. 3 (after Shazeer et al. 2017):  g(x) = TOP_k(Softmax(s(x) + eps)),  eps ~ N(0, sigma^2) in training
    MoGE eq. 1:                               alpha(r) = softmax_top-K(s(r)),      r = phi(m), one per image

A gate is the router projection s (`dgmoe.moe.routers`: cosine or linear, computed in fp32, also under
autocast), with its parameters as the gate's own (a layer's `router.*` state-dict keys), plus what turns its
logits into a decision: gate noise drawn per sample (the same numbers whatever the process count,
`dgmoe.sharding.per_sample`), top-k, renormalisation of the k gates (GMoE's top-2; MoGE's softmax_top-K, any
K), the official code's capacity with token dropping (`keep`), forced routing (every unit to one expert) and
image routing (the units are the images' contexts r, set by the model with `routing_context`). As megablocks'
`LearnedRouter`, the gate decides and the dispatch (`dgmoe.moe.dispatch`) computes the experts on its
decision. The balance loss of a decision is the gate's too: 0.5 (L_imp + L_load) (GMoE App. C.4, eqs. 9-10;
MoGE App. A over images; MoA's code's variant).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Literal

import torch
import torch.nn as nn

from dgmoe.moe import kernels
from dgmoe.moe.config import MoEConfig
from dgmoe.moe.dispatch import capacity_keep_mask, expert_capacity
from dgmoe.moe.losses import cv_squared, load_probabilities
from dgmoe.moe.routers import CosineRouter, LinearRouter
from dgmoe.scope import SCOPE, scoped
from dgmoe.sharding import all_reduce_sum, per_sample

#: 'routed' (GMoE eq. 3, MoGE eq. 1), 'shared_only' (MoGE-SE, §2.2 (i): f = f_0) or 'forced' (every unit
#: through one expert with weight 1, MoGE App. A / Fig. 3)
RoutingMode = Literal["routed", "shared_only", "forced"]
ROUTING_MODES: tuple[RoutingMode, ...] = ("routed", "shared_only", "forced")


@contextlib.contextmanager
def routing_context(r: torch.Tensor | None) -> Iterator[None]:
    """The per-image routing context r [B, d] read by image-routed layers in the forwards inside the block."""
    with scoped(routing_context=r):
        yield


def fused_router_applies(device_type: str, compiling: bool, config: MoEConfig) -> bool:
    """Whether the gate runs the fused Triton router (`dgmoe.moe.kernels.fused_route`): eager on CUDA with triton
    installed, for token routing with the paper's load loss and k <= 8 (the official code's 'tutel' and MoA's
    variants and image routing keep the torch ops). Compiled calls keep them too, which the compiler fuses into a
    few kernels of its own: the fused router's custom operators are captured without a graph break, but no GPU
    has timed the two against each other (docs/benchmarks.md, section 12). It stands apart from the rules of
    `dgmoe.moe.dispatch.choose_path`: it decides how the gate computes a decision, from the gate's configuration,
    not which expert path runs on it, and every router path combines with every expert path."""
    return (device_type == "cuda" and not compiling and config.routing == "token" and config.load_loss == "paper"
            and config.top_k <= min(config.num_experts, 8) and kernels.available())


@dataclass(frozen=True)
class Routing:
    """The routing decision for R routed units (tokens, or images with image routing)."""

    logits: torch.Tensor        # [R, N] clean router logits (fp32)
    noisy_logits: torch.Tensor  # [R, N] logits + noise (== logits without noise)
    probs: torch.Tensor         # [R, N] what the importance loss sums: softmax(noisy) (token), alpha (image)
    expert_idx: torch.Tensor    # [R, k] chosen experts, by decreasing gate
    gates: torch.Tensor         # [R, k] combine weights (renormalised if configured)
    keep: torch.Tensor | None   # [R, k] False where capacity dropped the assignment
    #: [1 or 2, N] this process's per-expert importance (and, with gate noise, load) sums, where the fused
    #: router computed them with the decision (`balance_loss` reduces them); None: computed from the above
    sums: torch.Tensor | None = None


class Gate(nn.Module):
    """The routing of a layer configured by `config`; calling it gives the router logits [R, N] (the router
    projection's forward), `route` the decision. Built by `build_gate` on a router of `dgmoe.moe.routers`."""

    config: MoEConfig

    def route(self, inputs: torch.Tensor, lead_shape: tuple[int, ...] | None = None) -> Routing:
        """inputs [R, d] (tokens, or image contexts) -> routing decision, in fp32. `lead_shape` ([B, N] for
        tokens, [B] for images) lets the gate noise be drawn per sample. Where `fused_router_applies`, the noise,
        softmax, top-k, renormalisation and the balance sums run in one Triton kernel (`dgmoe.moe.kernels`)
        on the same draws."""
        cfg = self.config
        with torch.autocast(device_type=inputs.device.type, enabled=False):
            logits = self(inputs.float())
            sigma = cfg.gate_noise_std
            draws = None
            if self.training and sigma > 0:
                shape = (*(lead_shape or (inputs.shape[0],)), cfg.num_experts)
                draws = per_sample(shape, lambda t: t.normal_(), logits).reshape(logits.shape)
            if fused_router_applies(inputs.device.type, torch.compiler.is_compiling(), cfg):
                fused = kernels.fused_route(logits, cfg.top_k, draws, sigma, cfg.renormalize)
                sums = torch.stack([fused.importance, fused.load]) if fused.noisy else fused.importance.unsqueeze(0)
                return Routing(fused.logits, fused.noisy_logits, fused.probs, fused.expert_idx, fused.gates,
                               self._keep(fused.expert_idx, fused.gates), sums)
            noisy = logits if draws is None else logits + draws * sigma
            probs = noisy.softmax(dim=-1)
            gates, expert_idx = probs.topk(cfg.top_k, dim=-1)
            if cfg.renormalize and (cfg.top_k > 1 or cfg.routing == "image"):  # MoGE: softmax_top-K, any K
                gates = gates / gates.sum(dim=-1, keepdim=True)
        if cfg.routing == "image":  # MoGE balances the combine weights alpha (zero outside the top-K)
            probs = torch.zeros_like(probs).scatter(1, expert_idx, gates)
        return Routing(logits, noisy, probs, expert_idx, gates, self._keep(expert_idx, gates))

    def _keep(self, expert_idx: torch.Tensor, gates: torch.Tensor) -> torch.Tensor | None:
        """The official code's capacity (token dropping), or None without a capacity factor."""
        cfg = self.config
        if cfg.capacity_factor is None:
            return None
        capacity = expert_capacity(expert_idx.shape[0], cfg.num_experts, cfg.top_k, cfg.capacity_factor)
        return capacity_keep_mask(expert_idx, gates, cfg.num_experts, capacity, cfg.batch_prioritized)

    def forced(self, units: int, device: torch.device, expert: int | None) -> Routing:
        """Every one of `units` routed units to `expert` with weight 1 (MoGE App. A's forced-expert matrix)."""
        n = self.config.num_experts
        if expert is None or not 0 <= expert < n:
            raise ValueError(f"forced routing needs an expert in [0, {n}), got {expert}")
        idx = torch.full((units, 1), expert, device=device, dtype=torch.long)
        ones = torch.ones((units, 1), device=device)
        probs = torch.zeros((units, n), device=device).scatter(1, idx, 1.0)
        return Routing(probs, probs, probs, idx, ones, None)

    def routing_for(self, x: torch.Tensor, mode: RoutingMode = "routed", expert: int | None = None) -> Routing:
        """The decision for a layer input x [..., d]: one per token (token routing), or one per image from the
        routing context r of `routing_context` (image routing); 'forced' sends every unit to `expert`."""
        if self.config.routing == "token":
            tokens = x.reshape(-1, x.shape[-1])
            return self.forced(tokens.shape[0], x.device, expert) if mode == "forced" else \
                self.route(tokens, tuple(x.shape[:-1]))
        if mode == "forced":
            return self.forced(x.shape[0], x.device, expert)
        r = SCOPE.routing_context
        if r is None:
            raise ValueError("an image-routed MoE layer ran without a routing context; call the model's "
                             "forward_features(x, meta=...) rather than a block directly")
        if r.shape[0] != x.shape[0]:
            raise ValueError(f"the routing context describes {r.shape[0]} images but the batch has {x.shape[0]}")
        return self.route(r, (x.shape[0],))

    def balance_loss(self, routing: Routing) -> torch.Tensor:
        """0.5 * (L_imp + L_load) (GMoE App. C.4; MoGE App. A). Without gate noise the load term is 0. The
        importance and load sums are the global batch's under multi-process training."""
        cfg = self.config
        if cfg.load_loss == "moa":
            return self._moa_balance_loss(routing)
        if routing.sums is not None:  # the fused router's (GMoE App. C.4's 'paper' terms)
            return 0.5 * cv_squared(all_reduce_sum(routing.sums)).sum()
        sums = routing.probs.sum(dim=0, keepdim=True)  # [1, N] importance
        if cfg.gate_noise_std > 0:
            scores = routing.logits.softmax(-1) if cfg.load_loss == "tutel" else None
            load = load_probabilities(routing.logits, routing.noisy_logits, cfg.top_k, cfg.gate_noise_std, scores)
            sums = torch.cat([sums, load.sum(dim=0, keepdim=True)])  # [2, N]: one all-reduce, one cv^2 pass
        return 0.5 * cv_squared(all_reduce_sum(sums)).sum()

    def _moa_balance_loss(self, routing: Routing) -> torch.Tensor:
        """MoA's code's 0.5 (L_imp + L_load) (`load_importance_loss`, cvlab-kaist/MoA ed7bc9d): importance sums
        the *clean* softmax, the load threshold is the k-th largest *noisy probability* (not logit), and both
        squared coefficients of variation use the unbiased variance (torch's `var()` default)."""
        cfg = self.config
        clean = routing.logits.softmax(-1)
        sums = clean.sum(dim=0, keepdim=True)
        if cfg.gate_noise_std > 0:
            load = load_probabilities(clean, routing.noisy_logits.softmax(-1), cfg.top_k, cfg.gate_noise_std, clean)
            sums = torch.cat([sums, load.sum(dim=0, keepdim=True)])
        return 0.5 * cv_squared(all_reduce_sum(sums), unbiased=True).sum()


class LinearGate(LinearRouter, Gate):
    """A gate on the linear router: g = softmax(W x + eps) (GMoE eq. 3, V-MoE; SF-MoE)."""

    def __init__(self, config: MoEConfig, in_dim: int):
        super().__init__(in_dim, config.num_experts)
        self.config = config


class CosineGate(CosineRouter, Gate):
    """A gate on the cosine router (GMoE §4.3, MoGE §2.1)."""

    def __init__(self, config: MoEConfig, in_dim: int):
        super().__init__(in_dim, config.num_experts, config.router_dim, config.temperature_init,
                         config.temperature_min)
        self.config = config


GATES: dict[str, type[Gate]] = {"linear": LinearGate, "cosine": CosineGate}


def build_gate(config: MoEConfig, in_dim: int) -> Gate:
    """The gate of a layer configured by `config` on inputs `in_dim` wide (tokens, or the context r)."""
    if config.router not in GATES:
        raise ValueError(f"unknown router {config.router!r}; valid: {', '.join(sorted(GATES))}")
    return GATES[config.router](config, in_dim)
