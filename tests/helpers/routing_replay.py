"""Top-k routing decisions that rounding can flip, recorded once and replayed, so that a golden run compares
continuous quantities on every CPU kernel set.

A top-k router is discontinuous: where a token's k-th and (k+1)-th gate probabilities are within rounding
of each other, another summation order (AVX-512, AVX2 or scalar kernels; another BLAS) can pick the other
expert, and from that step on the run follows another trajectory (measured: one token of 375,360 in the
golden GMoE run, near-ties up to 5.7e-4 (relative) by step 29, flipped under scalar or AVX2 kernels). Such a
decision is not determined by float32 arithmetic, so the golden test takes the reference's:

- `record_ambiguous(margin)`: while active, every `Gate.route` call (a sparse layer's decision) is numbered
  in call order, and each token whose relative top-k margin (p_k - p_{k+1}) / p_k is below `margin` is
  noted with its decision;
- `replay(trace, run_margin_bound)`: the same numbering; a noted token whose decision differs from the reference's is
  given the reference's experts (gates re-read from the run's own probabilities) when the run's own relative
  margin is below `run_margin_bound` (its probabilities drift with the run's trajectory), and is an error otherwise
  (a real change of the routing). Token routing without capacity only (the golden runs').

Every other token keeps its own decision: outside the noted set the reference's margin is >= the recording
margin, far above rounding, so a difference there is a real change and shows in the records.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

import torch

from dgmoe.moe.gate import Gate, Routing


def relative_margins(probs: torch.Tensor, k: int) -> torch.Tensor:
    """(p_k - p_{k+1}) / p_k per routed unit: how far each top-k decision is from a tie."""
    top = probs.detach().topk(min(k + 1, probs.shape[-1]), dim=-1).values
    if top.shape[-1] <= k:
        return torch.full(top.shape[:1], float("inf"))
    return (top[:, k - 1] - top[:, k]) / top[:, k - 1].clamp_min(1e-30)


class RoutingChanged(AssertionError):
    """A decision differs from the reference's beyond what rounding can flip."""


@contextlib.contextmanager
def _numbered_route(visit) -> Iterator[None]:
    original = Gate.route
    calls = [0]

    def route(self: Gate, inputs: torch.Tensor, lead_shape=None) -> Routing:
        routing = original(self, inputs, lead_shape)
        calls[0] += 1
        return visit(self, calls[0] - 1, routing)

    Gate.route = route  # type: ignore[method-assign]
    try:
        yield
    finally:
        Gate.route = original  # type: ignore[method-assign]


@contextlib.contextmanager
def record_ambiguous(margin: float) -> Iterator[dict]:
    """Note every decision within `margin` (relative) of a tie: {"calls": n, "tokens": [[call, unit, margin,
    [experts by decreasing gate]], ...]}."""
    trace: dict = {"calls": 0, "tokens": []}

    def visit(layer: Gate, call: int, routing: Routing) -> Routing:
        k = routing.expert_idx.shape[-1]
        margins = relative_margins(routing.probs, k)
        for unit in (margins < margin).nonzero().flatten().tolist():
            trace["tokens"].append([call, unit, float(margins[unit]), routing.expert_idx[unit].tolist()])
        trace["calls"] = call + 1
        return routing

    with _numbered_route(visit):
        yield trace


@contextlib.contextmanager
def replay(trace: dict, run_margin_bound: float) -> Iterator[dict]:
    """Give the reference's decision to the noted tokens that rounding flipped (see the module docstring);
    yields {"calls": n, "replayed": [[call, unit, run's margin], ...]}."""
    noted: dict[int, list] = {}
    for call, unit, ref_margin, experts in trace["tokens"]:
        noted.setdefault(call, []).append((unit, ref_margin, experts))
    seen: dict = {"calls": 0, "replayed": []}

    def visit(layer: Gate, call: int, routing: Routing) -> Routing:
        seen["calls"] = call + 1
        if call not in noted:
            return routing
        if layer.config.routing != "token" or routing.keep is not None:
            raise NotImplementedError("routing replay covers token routing without a capacity")
        k = routing.expert_idx.shape[-1]
        margins = relative_margins(routing.probs, k)
        expert_idx = routing.expert_idx.clone()
        for unit, ref_margin, experts in noted[call]:
            if routing.expert_idx[unit].tolist() == experts:
                continue
            run_margin = float(margins[unit])
            if run_margin >= run_margin_bound:
                raise RoutingChanged(f"routing call {call}, unit {unit}: experts {routing.expert_idx[unit].tolist()}"
                                     f" where the reference chose {experts} (relative margin {ref_margin:.3g}), with "
                                     f"a relative margin {run_margin:.3g} beyond its drift ({run_margin_bound:g})")
            expert_idx[unit] = torch.tensor(experts, dtype=expert_idx.dtype)
            seen["replayed"].append([call, unit, run_margin])
        if torch.equal(expert_idx, routing.expert_idx):
            return routing
        gates = routing.probs.gather(-1, expert_idx)
        if layer.config.renormalize and (k > 1 or layer.config.routing == "image"):
            gates = gates / gates.sum(dim=-1, keepdim=True)
        return dataclasses.replace(routing, expert_idx=expert_idx, gates=gates)

    with _numbered_route(visit):
        yield seen
