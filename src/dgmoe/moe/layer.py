"""The sparse MoE FFN that replaces a transformer block's dense FFN, for token and for image routing.

    GMoE / SF-MoE (GMoE eq. 3, §4.3, App. C):  y(x) = sum_{e in TOP_k} g_e(x) f_e(x),
                                               g = Softmax(s(x) + eps),  eps ~ N(0, sigma^2) in training
    MoGE (eq. 1):                              f(x, m) = gamma f_0(x) + (1 - gamma) sum_k alpha_k(phi(m)) f_k(x)

`MoEMlp` composes three parts, as ScatterMoE's layer, which takes its routing as input: the gate
(`dgmoe.moe.gate`: the router s, noise, top-k, capacity, forced and image routing; at `router`, so that its
parameters keep their `router.*` names), the dispatch (`dgmoe.moe.dispatch`: `choose_path` says which path
computes the experts on the gate's decision) and the experts (`dgmoe.moe.experts`, or an adapter bank); with a
shared expert f_0 the routed output is mixed with it by gamma = sigmoid(g) (MoGE).

Auxiliary losses are returned values: each training forward records its named terms and `aux_losses()`
returns their mean over the forwards since `clear_aux()`: 'balance' = 0.5 (L_imp + L_load) (GMoE App. C.4
over tokens; MoGE App. A over images; `Gate.balance_loss`) and, with `cka_tokens`, 'cka' (MoGE eq. 2).
`shared_features()` gives the last forward's pooled shared-expert output and the images' argmax routing
(MoGE eq. 3's inputs). Under multi-process training the balance statistics and the gate noise are the
global batch's (`dgmoe.sharding`).

Public handles instead of private state: `add_routing_observer` (a function called with every forward's
decision, as `dgmoe.moe.record` records it), `set_routing_mode` and the `routing_mode(model, ...)` context
(MoGE's shared-expert-only and forced-expert modes), and `dispatch_override` (a dispatch function instead of
the chosen path, for benchmarks and tests).
"""
from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from typing import Callable, Iterator

import torch
import torch.nn as nn
from torch.utils.hooks import RemovableHandle

from dgmoe.moe.config import MoEConfig
from dgmoe.moe.dispatch import Dispatch, choose_path, layer_needs, path_function, prepare_uncompiled
from dgmoe.moe.experts import ExpertBank, Experts, Mlp, compute_dtype
from dgmoe.moe.gate import ROUTING_MODES, Gate, Routing, RoutingMode, build_gate
from dgmoe.moe.losses import cka_diversity_loss
from dgmoe.scope import SCOPE, scoped

#: an observer of a layer's decisions: (routing, the lead shape of its units: [B, N] tokens or [B] images)
RoutingObserver = Callable[[Routing, torch.Size], None]


@contextlib.contextmanager
def no_aux_record() -> Iterator[None]:
    """Forwards inside the block record no auxiliary terms (activation checkpointing's recomputation: they
    are computed, as in the forward, and dropped)."""
    with scoped(record_aux=False):
        yield


class MoEMlp(nn.Module):
    """Drop-in replacement for a block's `Mlp`: N experts, a gate and, optionally, a shared expert.
    `context_dim` is the width of r for image routing; `activation` is the backbone FFN's own (`ACTIVATIONS`),
    which the experts and the shared expert use, so that copies of that FFN compute what it computes.
    `experts` replaces the FFN experts by another bank (`dgmoe.moe.adapter_experts`: adapters on a d_in -> d_out
    projection, whose output is d_out wide). `dispatch_override` (also settable later as an attribute) runs
    that dispatch function instead of the path `dgmoe.moe.dispatch.choose_path` picks: benchmarks and tests
    hold one path against another with it; training never sets it."""

    def __init__(self, dim: int, hidden: int, config: MoEConfig = MoEConfig(), context_dim: int | None = None,
                 activation: str = "gelu", experts: ExpertBank | None = None,
                 dispatch_override: Dispatch | None = None):
        super().__init__()
        if config.routing != "image":
            router_in = dim
        elif context_dim is None:
            raise ValueError("image routing needs the routing context's width (context_dim)")
        else:
            router_in = context_dim
        self.config = config
        self.router: Gate = build_gate(config, router_in)
        self.experts: ExpertBank = (Experts(config.num_experts, dim, hidden, config.expert_dropout, activation)
                                    if experts is None else experts)
        if self.experts.num_experts != config.num_experts:
            raise ValueError(f"the expert bank has {self.experts.num_experts} experts, the config {config.num_experts}")
        self.shared = Mlp(dim, hidden, activation=activation) if config.shared_expert else None
        g = config.gamma_init
        self.gamma_logit = nn.Parameter(torch.tensor(math.log(g / (1.0 - g)))) if config.shared_expert else None
        self._mode: RoutingMode = "routed"
        self._forced_expert: int | None = None
        self.dispatch_override = dispatch_override
        # What training forwards leave for the losses, held in tensors (a list that grows would make
        # torch.compile guard on its length and recompile): the sums of each auxiliary term and their count
        # since `clear_aux()`, and the last forward's pooled shared-expert output and image routing.
        self._aux_sums: dict[str, torch.Tensor] | None = None
        self._aux_forwards: torch.Tensor | None = None
        self._last_shared: tuple[torch.Tensor, torch.Tensor] | None = None
        self._routing_observers: OrderedDict[int, RoutingObserver] = OrderedDict()
        self.adapter: nn.Module | None = None  # a PEFT adapter in parallel (`dgmoe.models.peft`), when one is added
        # On the meta device (a description that never runs: `describe_model`, `dgmoe models`) nothing is
        # prepared, so that describing a model does not import torch._dynamo (about 1 s).
        if not next(self.experts.parameters()).is_meta:
            prepare_uncompiled()

    @property
    def gamma(self) -> torch.Tensor | None:
        return None if self.gamma_logit is None else torch.sigmoid(self.gamma_logit)

    # ----- routing modes and observers --------------------------------------------------------------
    @property
    def routing_mode(self) -> RoutingMode:
        return self._mode

    @property
    def forced_expert(self) -> int | None:
        return self._forced_expert

    def set_routing_mode(self, mode: RoutingMode, expert: int | None = None) -> None:
        """'routed' (GMoE eq. 3, MoGE eq. 1), 'shared_only' (MoGE-SE, §2.2 (i): f = f_0; needs the shared
        expert) or 'forced' (every unit through `expert` with weight 1, MoGE App. A / Fig. 3)."""
        if mode not in ROUTING_MODES:
            raise ValueError(f"routing mode must be 'routed', 'shared_only' or 'forced', got {mode!r}")
        if mode == "forced" and (expert is None or not 0 <= expert < self.config.num_experts):
            raise ValueError(f"forced routing needs expert in [0, {self.config.num_experts}), got {expert}")
        self._mode, self._forced_expert = mode, expert

    def add_routing_observer(self, observer: RoutingObserver) -> RemovableHandle:
        """Call `observer(routing, lead_shape)` with every forward's decision (not in 'shared_only' mode)
        until `handle.remove()`; no observer, no cost."""
        handle = RemovableHandle(self._routing_observers)
        self._routing_observers[handle.id] = observer
        return handle

    # ----- forward --------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The layer's output (GMoE eq. 3; with a shared expert, MoGE eq. 1), plus a PEFT adapter's in
        parallel when one was added (`dgmoe.models.peft`: FFN(x) + adapter(x))."""
        out = self._moe(x)
        return out if self.adapter is None else out + self.adapter(x)

    def _moe(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        shared = self.shared(x) if self.shared is not None else None
        if self._mode == "shared_only":
            if shared is None:
                raise ValueError("shared_only routing needs a shared expert (built with shared_expert=False)")
            return shared
        routing = self.router.routing_for(x, self._mode, self._forced_expert)
        tokens = x.reshape(-1, x.shape[-1])
        idx, gates, keep = routing.expert_idx, routing.gates, routing.keep
        if cfg.routing == "image":  # every token of an image goes to the image's experts
            per_image = tokens.shape[0] // x.shape[0]
            idx, gates = idx.repeat_interleave(per_image, 0), gates.repeat_interleave(per_image, 0)
        dispatch = self.dispatch_override or self._chosen_dispatch(tokens)
        out = dispatch(tokens, idx, gates, self.experts, keep).reshape(*x.shape[:-1], -1)
        if self.training and self._mode == "routed":
            self._record(x, routing, shared)
        if self._routing_observers:
            lead = x.shape[:-1] if cfg.routing == "token" else x.shape[:1]
            for observer in self._routing_observers.values():
                observer(routing, lead)
        if shared is None:
            return out
        gate = self.gamma
        assert gate is not None  # built together with the shared expert
        gamma = gate.to(x.dtype)
        return gamma * shared + (1.0 - gamma) * out

    def _chosen_dispatch(self, tokens: torch.Tensor) -> Dispatch:
        compiling = torch.compiler.is_compiling()
        dtype = compute_dtype(tokens)
        needs = layer_needs(self.config.dispatch, self.experts, tokens, dtype, compiling)
        return path_function(choose_path(tokens.device.type, dtype, compiling, needs), compiling)

    def _record(self, x: torch.Tensor, routing: Routing, shared: torch.Tensor | None) -> None:
        """Add this forward's auxiliary terms to the sums (tensors: no host sync, a fixed structure for
        torch.compile) and keep MoGE's eq. 3 inputs of the last forward. Under `no_aux_record` (activation
        checkpointing's recomputation) the terms are computed as in the forward, so that the recomputation
        saves the same tensors for backward as the forward did (torch.utils.checkpoint checks), and dropped."""
        aux = {"balance": self.router.balance_loss(routing)}
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


@contextlib.contextmanager
def routing_mode(model: nn.Module, mode: RoutingMode, expert: int | None = None) -> Iterator[None]:
    """Every sparse layer of `model` in routing `mode` (`MoEMlp.set_routing_mode`) inside the block, back in
    its own mode afterwards."""
    layers = [m for m in model.modules() if isinstance(m, MoEMlp)]
    previous = [(layer.routing_mode, layer.forced_expert) for layer in layers]
    try:
        for layer in layers:
            layer.set_routing_mode(mode, expert)
        yield
    finally:
        for layer, (old_mode, old_expert) in zip(layers, previous):
            layer.set_routing_mode(old_mode, old_expert)
