"""Which expert every patch goes to (GMoE §5.4 "Expert Selection", Fig. 3c, App. E Figs. 8-13).

`routing_maps` runs a model in eval mode under `dgmoe.moe.record.record_routing` and keeps, per MoE layer,
the top-1 expert of every *patch* token (the CLS/prefix tokens are dropped) as a `[B, gh, gw]` map, plus
its gate. `usage_table` turns maps of several domains into the share of patches each expert receives.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn as nn

from dgmoe.document import Cell, Table


@dataclass(frozen=True)
class RoutingMaps:
    """Top-1 routing of a batch of images: per MoE layer name, `[B, gh, gw]` expert ids and gates."""

    experts: dict[str, torch.Tensor]
    gates: dict[str, torch.Tensor]
    num_experts: dict[str, int]
    grid_size: tuple[int, int]

    @property
    def layers(self) -> list[str]:
        return list(self.experts)


def grid_size_of(model: nn.Module) -> tuple[int, int]:
    pe = getattr(model, "patch_embed", None)
    grid = getattr(pe, "grid_size", None)
    if grid is None:
        raise ValueError(f"{type(model).__name__} has no patch_embed.grid_size: routing maps need a ViT-style model")
    return int(grid[0]), int(grid[1])


def num_experts_of(model: nn.Module) -> dict[str, int]:
    """Number of experts of each MoE layer, by module name."""
    from dgmoe.moe.auxiliary import sparse_layers

    return {name: int(layer.config.num_experts) for name, layer in sparse_layers(model).items()}


def top1_patch_map(ids: torch.Tensor, grid_size: tuple[int, int], num_prefix_tokens: int = 1) -> torch.Tensor:
    """`[B, N, k]` (or `[B, N]`) per-token expert ids, top-1 first -> `[B, gh, gw]` top-1 map of the patches."""
    top1 = ids[..., 0] if ids.dim() == 3 else ids
    gh, gw = grid_size
    if top1.shape[1] - num_prefix_tokens != gh * gw:
        raise ValueError(f"{top1.shape[1]} tokens minus {num_prefix_tokens} prefix tokens do not make a "
                         f"{gh}x{gw} patch grid")
    return top1[:, num_prefix_tokens:].reshape(top1.shape[0], gh, gw)


@torch.no_grad()
def routing_maps(model: nn.Module, images: torch.Tensor, batch_size: int = 64) -> RoutingMaps:
    """Run `images` (already normalised model inputs `[B, 3, H, W]`) and record every MoE layer's top-1."""
    from dgmoe.moe.record import record_routing

    n_experts = num_experts_of(model)
    if not n_experts:
        raise ValueError(f"{type(model).__name__} has no MoE layer: nothing to map (a dense ViT has no routing)")
    grid = grid_size_of(model)
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    was_training = model.training
    model.eval()
    experts: dict[str, list[torch.Tensor]] = {}
    gates: dict[str, list[torch.Tensor]] = {}
    device = next(model.parameters()).device
    try:
        for i in range(0, len(images), batch_size):
            with record_routing(model) as rec:
                model(images[i:i + batch_size].to(device))
            for name, r in rec.items():
                experts.setdefault(name, []).append(top1_patch_map(r.expert_ids, grid, prefix))
                gates.setdefault(name, []).append(top1_patch_map(r.gates, grid, prefix))
    finally:
        model.train(was_training)
    return RoutingMaps({k: torch.cat(v) for k, v in experts.items()}, {k: torch.cat(v) for k, v in gates.items()},
                       n_experts, grid)


def expert_usage(expert_map: torch.Tensor, num_experts: int) -> torch.Tensor:
    """`[E]` share of patches (top-1) that went to each expert."""
    counts = torch.bincount(expert_map.reshape(-1).long(), minlength=num_experts).double()
    return counts / counts.sum().clamp_min(1)


def usage_table(per_domain: dict[str, RoutingMaps]) -> pd.DataFrame:
    """Long table `layer, domain, expert, fraction` over every MoE layer and domain."""
    rows = []
    for domain, maps in per_domain.items():
        for layer in maps.layers:
            for e, f in enumerate(expert_usage(maps.experts[layer], maps.num_experts[layer]).tolist()):
                rows.append({"layer": layer, "domain": domain, "expert": e, "fraction": f})
    return pd.DataFrame(rows, columns=["layer", "domain", "expert", "fraction"])


def usage_summary(table: pd.DataFrame, title: str = "") -> Table:
    """The long `usage_table` as a `Table`: one row per (layer, domain), one column per expert (percent of
    patches)."""
    wide = table.pivot_table(index=["layer", "domain"], columns="expert", values="fraction", sort=False)
    rows = [[layer, domain, *(Cell(mean=100 * float(v)) for v in row)] for (layer, domain), row in wide.iterrows()]
    return Table.make(title, ["layer", "domain", *(f"e{e}" for e in wide.columns)], rows, left=2)
