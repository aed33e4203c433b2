"""Expert FFNs: a bank of N experts (dim -> hidden -> dim, GELU) with stacked weights `[N, ...]`, and the dense
FFN (`Mlp`, timm's names) that dense blocks and MoGE's shared expert use.

The activation is the backbone's own (`ACTIVATIONS`): GELU (ViT eq. 3), or QuickGELU x * sigmoid(1.702 x)
for OpenAI's CLIP towers (Radford et al. 2021, their released code), so that experts copied from a dense FFN
compute what it computes (GMoE App. C.2)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.sharding import Dropout

Activation = Literal["gelu", "quick_gelu"]
if TYPE_CHECKING:
    from dgmoe.moe.adapter_experts import KroneckerExperts, LoRAExperts


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """OpenAI CLIP's GELU approximation, x * sigmoid(1.702 x) (timm's `QuickGELU`, open_clip's `QuickGELU`)."""
    return x * torch.sigmoid(1.702 * x)


#: activation name -> function; the name is a backbone's declared fact (`ModelInfo.activation`).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"gelu": F.gelu, "quick_gelu": quick_gelu}


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the experts' matmuls run in: autocast's when it is on for x's device, else x's."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


def activation_fn(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


class Act(nn.Module):
    """An `ACTIVATIONS` entry as a module (no parameters; `nn.GELU` itself for 'gelu', as timm)."""

    def __init__(self, name: str):
        super().__init__()
        self.name, self.fn = name, activation_fn(name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.name


class Experts(nn.Module):
    """N independent FFNs. Weights are stacked so a dense FFN can be copied into every expert (App. C.2)."""

    def __init__(self, num_experts: int, dim: int, hidden: int, dropout: float = 0.0, activation: str = "gelu"):
        super().__init__()
        self.num_experts, self.dim, self.hidden = num_experts, dim, hidden
        self.activation, self.act = activation, activation_fn(activation)
        self.fc1_weight = nn.Parameter(torch.empty(num_experts, hidden, dim))
        self.fc1_bias = nn.Parameter(torch.zeros(num_experts, hidden))
        self.fc2_weight = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.fc2_bias = nn.Parameter(torch.zeros(num_experts, dim))
        self.drop = nn.Dropout(dropout)
        self.reset_parameters_like_timm()

    def reset_parameters_like_timm(self) -> None:
        for w in (self.fc1_weight, self.fc2_weight):
            nn.init.trunc_normal_(w, std=0.02)
        nn.init.zeros_(self.fc1_bias)
        nn.init.zeros_(self.fc2_bias)

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.act(F.linear(x, self.fc1_weight[e], self.fc1_bias[e])))
        return F.linear(h, self.fc2_weight[e], self.fc2_bias[e])

    def forward_grouped(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Rows of `x` are grouped by expert (`counts[e]` rows for expert e, in order)."""
        w1, b1 = self.fc1_weight.unbind(0), self.fc1_bias.unbind(0)
        w2, b2 = self.fc2_weight.unbind(0), self.fc2_bias.unbind(0)
        outs = []
        for e, chunk in enumerate(x.split(counts)):
            if chunk.shape[0] == 0:
                continue
            h = self.drop(self.act(F.linear(chunk, w1[e], b1[e])))
            outs.append(F.linear(h, w2[e], b2[e]))
        return torch.cat(outs) if outs else x.new_zeros((0, self.dim))

    @property
    def out_features(self) -> int:
        return self.dim

    def extra_repr(self) -> str:
        act = "" if self.activation == "gelu" else f", activation={self.activation}"
        return f"num_experts={self.num_experts}, dim={self.dim}, hidden={self.hidden}{act}"


class Mlp(nn.Module):
    """The dense FFN: dim -> hidden -> dim with GELU (ViT eq. 3) or the backbone's own `activation`."""

    def __init__(self, in_features: int, hidden_features: int, drop: float = 0.0, activation: str = "gelu"):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act: nn.Module = nn.GELU() if activation == "gelu" else Act(activation)
        self.drop1 = Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = Dropout(drop)
        self.adapter: nn.Module | None = None  # a PEFT adapter in parallel (`dgmoe.models.peft`), when one is added

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))
        return out if self.adapter is None else out + self.adapter(x)


#: what the dispatch runs: GMoE's FFN experts, or adapter experts on a projection (`dgmoe.moe.adapter_experts`)
ExpertBank = Union[Experts, "LoRAExperts", "KroneckerExperts"]
