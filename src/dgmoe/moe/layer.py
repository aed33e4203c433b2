"""The sparse MoE FFN that replaces a transformer block's dense FFN, for token and for image routing.

    GMoE / SF-MoE (GMoE eq. 3, §4.3, App. C):  y(x) = sum_{e in TOP_k} g_e(x) f_e(x),
                                               g = Softmax(s(x) + eps),  eps ~ N(0, sigma^2) in training
    MoGE (eq. 1):                              f(x, m) = gamma f_0(x) + (1 - gamma) sum_k alpha_k(phi(m)) f_k(x)

The router s (cosine or linear, computed in fp32, also under autocast) scores each token (routing='token') or
each image's context r = phi(m) (routing='image': the model provides r with `routing_context`, and every
token of an image goes to the image's experts); sigma = 1/N by default (App. C.3). With a shared expert f_0
the routed output is mixed with it by gamma = sigmoid(g) (MoGE). Experts run through one dispatch whatever
the routing (`dgmoe.moe.dispatch`).

Auxiliary losses are returned values: each training forward records its named terms and `aux_losses()`
returns their mean over the forwards since `clear_aux()`: 'balance' = 0.5 (L_imp + L_load) (GMoE App. C.4
over tokens; MoGE App. A over images) and, with `cka_tokens`, 'cka' (MoGE eq. 2). `shared_features()` gives
the last forward's pooled shared-expert output and the images' argmax routing (MoGE eq. 3's inputs). Under
multi-process training the balance statistics and the gate noise are the global batch's (`dgmoe.sharding`).
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Literal

import torch
import torch.nn as nn

from dgmoe.moe.config import MoEConfig
from dgmoe.moe.dispatch import capacity_keep_mask, expert_capacity, masked_dispatch, sorted_dispatch
from dgmoe.moe.experts import ExpertBank, Experts, Mlp
from dgmoe.moe.losses import cka_diversity_loss, cv_squared, load_probabilities
from dgmoe.moe.routers import build_router
from dgmoe.moe.sync_free import GROUPED_MM, compute_dtype, fast_grouped_gemm, sync_free_dispatch
from dgmoe.scope import SCOPE, scoped
from dgmoe.sharding import all_reduce_sum, per_sample

RoutingMode = Literal["routed", "shared_only", "forced"]


@contextlib.contextmanager
def routing_context(r: torch.Tensor | None) -> Iterator[None]:
    """The per-image routing context r [B, d] read by image-routed layers in the forwards inside the block."""
    with scoped(routing_context=r):
        yield


@contextlib.contextmanager
def no_aux_record() -> Iterator[None]:
    """Forwards inside the block record no auxiliary terms (activation checkpointing's recomputation: they
    are computed, as in the forward, and dropped)."""
    with scoped(record_aux=False):
        yield


DISPATCH: dict[str, Callable] = {"grouped": sorted_dispatch, "mask": masked_dispatch}
#: `DISPATCH` entries hidden from torch.compile (made at a layer's construction, so that importing dgmoe does
#: not import torch._dynamo): the paths whose shapes depend on the routing run eagerly between graphs.
_UNCOMPILED: dict[str, Callable] = {}


def choose_dispatch(name: str, x: torch.Tensor) -> Callable:
    """The dispatch that runs a layer configured with `dispatch=name` on tokens `x`.

    "mask" is the reference loop. "grouped" is one interface over two implementations of the same sum:
    - the sync-free grouped-GEMM dispatch (`dgmoe.moe.sync_free`, fixed shapes) where torch's grouped GEMM
      is one fused kernel (CUDA SM90+, bf16) and under torch.compile in bf16, where the graph captures it;
    - the sorted per-expert dispatch (`dgmoe.moe.dispatch.sorted_dispatch`) elsewhere: eager CPU, where it
      is at its compute limit (docs/benchmarks.md), and fp32, where torch's grouped GEMM is a loop over
      experts that synchronises on a GPU and cannot be traced; compiled, it runs eagerly between graphs.
    """
    dtype = compute_dtype(x)
    if name == "grouped":
        if torch.compiler.is_compiling():
            return sync_free_dispatch if GROUPED_MM is not None and dtype == torch.bfloat16 else _UNCOMPILED[name]
        if _fused_grouped_gemm(x.device, dtype):
            return sync_free_dispatch
    if torch.compiler.is_compiling():
        return _UNCOMPILED[name]
    return DISPATCH[name]


@functools.cache
def _fused_grouped_gemm(device: torch.device, dtype: torch.dtype) -> bool:
    return fast_grouped_gemm(device, dtype)


def _prepare_uncompiled(name: str) -> None:
    if name not in _UNCOMPILED:
        _UNCOMPILED[name] = torch.compiler.disable(DISPATCH[name])


@dataclass
class Routing:
    """The routing decision for R routed units (tokens, or images with image routing)."""

    logits: torch.Tensor        # [R, N] clean router logits (fp32)
    noisy_logits: torch.Tensor  # [R, N] logits + noise (== logits without noise)
    probs: torch.Tensor         # [R, N] what the importance loss sums: softmax(noisy) (token), alpha (image)
    expert_idx: torch.Tensor    # [R, k] chosen experts, by decreasing gate
    gates: torch.Tensor         # [R, k] combine weights (renormalised if configured)
    keep: torch.Tensor | None   # [R, k] False where capacity dropped the assignment


class MoEMlp(nn.Module):
    """Drop-in replacement for a block's `Mlp`: N experts, a router and, optionally, a shared expert.
    `context_dim` is the width of r for image routing; `activation` is the backbone FFN's own (`ACTIVATIONS`),
    which the experts and the shared expert use, so that copies of that FFN compute what it computes.
    `experts` replaces the FFN experts by another bank (`dgmoe.moe.adapter_experts`: adapters on a d_in -> d_out
    projection, whose output is d_out wide)."""

    def __init__(self, dim: int, hidden: int, config: MoEConfig = MoEConfig(), context_dim: int | None = None,
                 activation: str = "gelu", experts: ExpertBank | None = None):
        super().__init__()
        if config.routing != "image":
            router_in = dim
        elif context_dim is None:
            raise ValueError("image routing needs the routing context's width (context_dim)")
        else:
            router_in = context_dim
        self.config = config
        self.router = build_router(config.router, router_in, config.num_experts, config.router_dim,
                                   config.temperature_init, config.temperature_min)
        self.experts: ExpertBank = (Experts(config.num_experts, dim, hidden, config.expert_dropout, activation)
                                    if experts is None else experts)
        if self.experts.num_experts != config.num_experts:
            raise ValueError(f"the expert bank has {self.experts.num_experts} experts, the config {config.num_experts}")
        self.shared = Mlp(dim, hidden, activation=activation) if config.shared_expert else None
        g = config.gamma_init
        self.gamma_logit = nn.Parameter(torch.tensor(math.log(g / (1.0 - g)))) if config.shared_expert else None
        self.mode: RoutingMode = "routed"
        self.forced_expert: int | None = None
        # What training forwards leave for the losses, held in tensors (a list that grows would make
        # torch.compile guard on its length and recompile): the sums of each auxiliary term and their count
        # since `clear_aux()`, and the last forward's pooled shared-expert output and image routing.
        self._aux_sums: dict[str, torch.Tensor] | None = None
        self._aux_forwards: torch.Tensor | None = None
        self._last_shared: tuple[torch.Tensor, torch.Tensor] | None = None
        self._routing_sink = None  # set by dgmoe.moe.record.record_routing
        self._dispatch: Callable | None = None  # a dispatch function instead of `choose_dispatch` (tests, benchmarks)
        # On the meta device (a description that never runs: `describe_model`, `dgmoe models`) nothing is
        # prepared, so that describing a model does not import torch._dynamo (about 1 s).
        if not next(self.experts.parameters()).is_meta:
            _prepare_uncompiled(config.dispatch)

    @property
    def gamma(self) -> torch.Tensor | None:
        return None if self.gamma_logit is None else torch.sigmoid(self.gamma_logit)

    # ----- routing --------------------------------------------------------------------------------
    def route(self, inputs: torch.Tensor, lead_shape: tuple[int, ...] | None = None) -> Routing:
        """inputs [R, d] (tokens, or image contexts) -> routing decision, in fp32. `lead_shape` ([B, N] for
        tokens, [B] for images) lets the gate noise be drawn per sample (the same numbers whatever the
        process count)."""
        cfg = self.config
        with torch.autocast(device_type=inputs.device.type, enabled=False):
            logits = self.router(inputs.float())
            sigma = cfg.gate_noise_std
            if self.training and sigma > 0:
                shape = (*(lead_shape or (inputs.shape[0],)), cfg.num_experts)
                noisy = logits + per_sample(shape, lambda t: t.normal_(), logits).reshape(logits.shape) * sigma
            else:
                noisy = logits
            probs = noisy.softmax(dim=-1)
            gates, expert_idx = probs.topk(cfg.top_k, dim=-1)
            if cfg.renormalize and (cfg.top_k > 1 or cfg.routing == "image"):  # MoGE: softmax_top-K, any K
                gates = gates / gates.sum(dim=-1, keepdim=True)
        if cfg.routing == "image":  # MoGE balances the combine weights alpha (zero outside the top-K)
            probs = torch.zeros_like(probs).scatter(1, expert_idx, gates)
        keep = None
        if cfg.capacity_factor is not None:
            capacity = expert_capacity(inputs.shape[0], cfg.num_experts, cfg.top_k, cfg.capacity_factor)
            keep = capacity_keep_mask(expert_idx, gates, cfg.num_experts, capacity, cfg.batch_prioritized)
        return Routing(logits, noisy, probs, expert_idx, gates, keep)

    def _forced(self, units: int, device: torch.device) -> Routing:
        e = self.forced_expert
        if e is None or not 0 <= e < self.config.num_experts:
            raise ValueError(f"forced routing needs an expert in [0, {self.config.num_experts}), got {e}")
        idx = torch.full((units, 1), e, device=device, dtype=torch.long)
        ones = torch.ones((units, 1), device=device)
        probs = torch.zeros((units, self.config.num_experts), device=device).scatter(1, idx, 1.0)
        return Routing(probs, probs, probs, idx, ones, None)

    def _routing_for(self, x: torch.Tensor) -> Routing:
        lead = tuple(x.shape[:-1])
        if self.config.routing == "token":
            tokens = x.reshape(-1, x.shape[-1])
            return self._forced(tokens.shape[0], x.device) if self.mode == "forced" else self.route(tokens, lead)
        if self.mode == "forced":
            return self._forced(x.shape[0], x.device)
        r = SCOPE.routing_context
        if r is None:
            raise ValueError("an image-routed MoE layer ran without a routing context; call the model's "
                             "forward_features(x, meta=...) rather than a block directly")
        if r.shape[0] != x.shape[0]:
            raise ValueError(f"the routing context describes {r.shape[0]} images but the batch has {x.shape[0]}")
        return self.route(r, (x.shape[0],))

    # ----- forward --------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        shared = self.shared(x) if self.shared is not None else None
        if self.mode == "shared_only":
            if shared is None:
                raise ValueError("shared_only routing needs a shared expert (built with shared_expert=False)")
            return shared
        routing = self._routing_for(x)
        tokens = x.reshape(-1, x.shape[-1])
        idx, gates, keep = routing.expert_idx, routing.gates, routing.keep
        if cfg.routing == "image":  # every token of an image goes to the image's experts
            per_image = tokens.shape[0] // x.shape[0]
            idx, gates = idx.repeat_interleave(per_image, 0), gates.repeat_interleave(per_image, 0)
        dispatch = self._dispatch or self._choose_dispatch(tokens)
        out = dispatch(tokens, idx, gates, self.experts, keep).reshape(*x.shape[:-1], -1)
        if self.training and self.mode == "routed":
            self._record(x, routing, shared)
        if self._routing_sink is not None:
            self._routing_sink(routing, x.shape[:-1] if cfg.routing == "token" else x.shape[:1])
        if shared is None:
            return out
        gate = self.gamma
        assert gate is not None  # built together with the shared expert
        gamma = gate.to(x.dtype)
        return gamma * shared + (1.0 - gamma) * out

    def _choose_dispatch(self, tokens: torch.Tensor) -> Callable:
        """`choose_dispatch` for GMoE's FFN experts; adapter banks (experts of their own shapes, which the
        grouped-GEMM kernels do not take) always run the sorted per-expert loop (or the "mask" reference)."""
        name = self.config.dispatch
        if isinstance(self.experts, Experts):
            return choose_dispatch(name, tokens)
        return _UNCOMPILED[name] if torch.compiler.is_compiling() else DISPATCH[name]

    def _record(self, x: torch.Tensor, routing: Routing, shared: torch.Tensor | None) -> None:
        """Add this forward's auxiliary terms to the sums (tensors: no host sync, a fixed structure for
        torch.compile) and keep MoGE's eq. 3 inputs of the last forward. Under `no_aux_record` (activation
        checkpointing's recomputation) the terms are computed as in the forward, so that the recomputation
        saves the same tensors for backward as the forward did (torch.utils.checkpoint checks), and dropped."""
        aux = {"balance": self.balance_loss(routing)}
        if self.config.cka_tokens > 0 and self.config.num_experts > 1:
            aux["cka"] = self.forced_token_cka(x)
        if not SCOPE.record_aux:
            return
        sums, count = self._aux_sums, self._aux_forwards
        if sums is None or count is None:
            self._aux_sums, self._aux_forwards = aux, torch.ones((), device=x.device)
        else:
            self._aux_sums = {name: sums[name] + value if name in sums else value for name, value in aux.items()}
            self._aux_forwards = count + 1
        if shared is not None and self.config.routing == "image":  # the discovered domain: top expert (eq. 3)
            pooled = shared.mean(dim=1) if self.config.supcon_pool == "mean" else shared[:, 0]
            self._last_shared = (pooled, routing.probs.detach().argmax(dim=1))

    def balance_loss(self, routing: Routing) -> torch.Tensor:
        """0.5 * (L_imp + L_load) (GMoE App. C.4; MoGE App. A). Without gate noise the load term is 0. The
        importance and load sums are the global batch's under multi-process training."""
        cfg = self.config
        if cfg.load_loss == "moa":
            return self._moa_balance_loss(routing)
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

    def forced_token_cka(self, x: torch.Tensor) -> torch.Tensor:
        """MoGE eq. 2: t random tokens H of the layer input through every expert, mean pairwise linear CKA."""
        tokens = x.reshape(-1, x.shape[-1])
        t = min(self.config.cka_tokens, tokens.shape[0])
        h = tokens[torch.randperm(tokens.shape[0], device=x.device)[:t]]
        return cka_diversity_loss(torch.stack([self.experts.expert(e, h) for e in range(self.config.num_experts)]))

    # ----- what a forward leaves for the losses -----------------------------------------------------
    def aux_losses(self) -> dict[str, torch.Tensor]:
        """Each named auxiliary term, averaged over the training forwards since `clear_aux()`."""
        if self._aux_sums is None or self._aux_forwards is None:
            return {}
        return {name: self._aux_sums[name] / self._aux_forwards for name in sorted(self._aux_sums)}

    def shared_features(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(pooled shared-expert output [B, D], argmax routing [B]) of the last training forward (MoGE eq. 3)."""
        return self._last_shared

    def clear_aux(self) -> None:
        self._aux_sums, self._aux_forwards, self._last_shared = None, None, None

    @torch.no_grad()
    def expand_dense_ffn(self, prefix: str, state: dict[str, torch.Tensor]) -> None:
        """Replace a dense checkpoint's `{prefix}.fc1/fc2` by copies in every expert and in the shared expert
        (GMoE App. C.2: experts start identical to the pretrained FFN; MoGE's shared expert too)."""
        n = self.config.num_experts
        for src, dst in (("fc1.weight", "fc1_weight"), ("fc1.bias", "fc1_bias"),
                         ("fc2.weight", "fc2_weight"), ("fc2.bias", "fc2_bias")):
            tensor = state.pop(f"{prefix}.{src}")
            state[f"{prefix}.experts.{dst}"] = tensor.unsqueeze(0).expand(n, *tensor.shape).clone()
            if self.shared is not None:
                state[f"{prefix}.shared.{src}"] = tensor.clone()

    def extra_repr(self) -> str:
        c = self.config
        shared = ", shared expert" if c.shared_expert else ""
        return f"{c.routing} routing, router={c.router}, top_k={c.top_k}, capacity_factor={c.capacity_factor}{shared}"
