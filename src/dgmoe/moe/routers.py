"""Routers: map tokens (or per-image contexts) to expert logits. Noise, top-k, capacity and the balance loss
are the gate's (`dgmoe.moe.gate`, whose gates are these routers with the routing added)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearRouter(nn.Module):
    """Logits W x; the gate is softmax(W x) (GMoE eq. 3, V-MoE)."""

    def __init__(self, dim: int, num_experts: int):
        super().__init__()
        self.proj = nn.Linear(dim, num_experts, bias=False)
        nn.init.normal_(self.proj.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.float(), self.proj.weight.float())


class CosineRouter(nn.Module):
    """Cosine router (GMoE §4.3, MoGE §2.1): logits = E^T W x / (tau ||W x|| ||E||).

    W projects to d_e (`router_dim`; None: no projection, the input is compared with the codes directly, as
    MoGE's router on r = phi(m)); the codebook E has one column per expert (initialised N(0, 0.01) as the
    official code); the temperature is learnt on a log scale, `logit_scale = log(1 / tau)`, clamped so tau
    stays >= temperature_min.
    """

    def __init__(self, dim: int, num_experts: int, router_dim: int | None = 256, temperature_init: float = 0.5,
                 temperature_min: float = 0.01):
        super().__init__()
        self.proj = nn.Linear(dim, router_dim) if router_dim is not None else None
        self.codebook = nn.Parameter(torch.empty(router_dim or dim, num_experts).normal_(0.0, 0.01))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / temperature_init)))
        self.max_logit_scale = math.log(1.0 / temperature_min)

    def reset_parameters_like_timm(self) -> None:
        if self.proj is not None:
            self.proj.reset_parameters()  # the official router keeps torch's default Linear init

    @property
    def temperature(self) -> torch.Tensor:
        return torch.exp(-self.logit_scale.clamp(max=self.max_logit_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float() if self.proj is None else F.linear(x.float(), self.proj.weight.float(), self.proj.bias.float())
        codes = F.normalize(self.codebook.float(), dim=0)
        scale = self.logit_scale.clamp(max=self.max_logit_scale).exp()
        # normalize(h) @ codes with the division by ||h|| moved onto the [T, N] logits: the same value
        # (F.normalize's eps included) without two extra passes over [T, d_e] forward and backward.
        return (h @ codes) * (scale / torch.linalg.vector_norm(h, dim=-1, keepdim=True).clamp_min(1e-12))

