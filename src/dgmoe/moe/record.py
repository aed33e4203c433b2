"""Recording which experts every token (or image) went to, at no cost when not recording.

    with record_routing(model) as rec:
        model(images)
    rec["blocks.8.mlp"].expert_ids   # token routing: [B, N_tokens, k], CLS token at index 0, top-1 first
                                     # image routing: [B, k]
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn as nn

from dgmoe.moe.auxiliary import sparse_layers
from dgmoe.moe.gate import Routing


@dataclass
class RoutingRecord:
    expert_ids: torch.Tensor  # [B, N, k] long ([B, k] for image routing)
    gates: torch.Tensor       # the same shape; 0 where a capacity dropped the assignment
    chunks: list = field(default_factory=list, repr=False)


@contextlib.contextmanager
def record_routing(model: nn.Module) -> Iterator[dict[str, RoutingRecord]]:
    """Collect per-token expert ids and gates of every MoE layer over the forwards inside the block."""
    chunks: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    records: dict[str, RoutingRecord] = {}
    layers = sparse_layers(model)

    def sink_for(name: str):
        def sink(routing: Routing, lead_shape: torch.Size) -> None:
            gates = routing.gates if routing.keep is None else routing.gates * routing.keep
            k = routing.expert_idx.shape[-1]
            chunks.setdefault(name, []).append((
                routing.expert_idx.detach().reshape(*lead_shape, k).cpu(),
                gates.detach().float().reshape(*lead_shape, k).cpu(),
            ))
        return sink

    handles = [layer.add_routing_observer(sink_for(name)) for name, layer in layers.items()]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()
        for name, parts in chunks.items():
            records[name] = RoutingRecord(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]))
