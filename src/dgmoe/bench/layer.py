"""The MoE layer against its limit: k dense FFNs over all tokens (the same FLOPs), forward + backward.

    python -m dgmoe bench layer --tokens 6304 --dim 384 --experts 6 --top-k 2
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from dgmoe.bench.timing import interleaved_medians
from dgmoe.models.layers import Mlp
from dgmoe.moe import MoEConfig, MoEMlp


@dataclass(frozen=True)
class LayerBenchConfig:
    tokens: int = 32 * 197     # a ViT-S/16 batch of 32 at 224 px
    dim: int = 384
    experts: int = 6
    top_k: int = 2
    router: str = "cosine"
    rounds: int = 7
    threads: int | None = None


def _fwd_bwd(module: nn.Module, x: torch.Tensor):
    def run() -> None:
        x.grad = None
        module.zero_grad(set_to_none=True)
        module(x).sum().backward()
    return run


def bench_moe_layer(cfg: LayerBenchConfig) -> dict[str, float]:
    """Seconds and ratios to the limit of: the dense limit, the sorted dispatch (router included), the
    mask loop, the capacity dispatch (factor 1.5) and the router alone."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    hidden = 4 * cfg.dim
    x = torch.randn(cfg.tokens, cfg.dim, requires_grad=True)
    x_k = torch.randn(cfg.tokens * cfg.top_k, cfg.dim, requires_grad=True)
    dense = Mlp(cfg.dim, hidden)
    layers = {name: MoEMlp(cfg.dim, hidden, MoEConfig(num_experts=cfg.experts, top_k=cfg.top_k, router=cfg.router,
                                                     **kw)).train()
              for name, kw in {"grouped (default)": {}, "auto": {"dispatch": "auto"}, "padded": {"dispatch": "padded"}, "mask": {"dispatch": "mask"},
                               "capacity_1.5": {"capacity_factor": 1.5}}.items()}
    router = layers["grouped (default)"].router

    def router_only() -> None:
        x.grad = None
        layers["grouped (default)"].zero_grad(set_to_none=True)
        r = layers["grouped (default)"].route(x)
        (r.gates.sum() + layers["grouped (default)"].auxiliary_loss(r)).backward()

    candidates = {"limit (k dense FFNs)": _fwd_bwd(dense, x_k), **{f"moe {n}": _fwd_bwd(m, x) for n, m in layers.items()},
                  "router alone": router_only}
    del router
    seconds = interleaved_medians(candidates, rounds=cfg.rounds)
    limit = seconds["limit (k dense FFNs)"]
    return {name: s for name, s in seconds.items()} | {f"{name} / limit": s / limit for name, s in seconds.items()}
