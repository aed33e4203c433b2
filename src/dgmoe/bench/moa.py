"""`dgmoe bench layer`'s MoA candidates: a MoA layer (`--peft moa`: 4 adapter experts of ranks 1, 2, 4, 8 on a
d -> 3d qkv projection, top-1 cosine routing, its balance loss) computed three ways on the same weights and
tokens:

- dense-then-mask, as MoA's code computes it (Lee et al., WACV 2025; cvlab-kaist/MoA ed7bc9d): every expert
  on every token, f_e(x) for e = 1..N, then y = W0 x + b0 + sum_e m_e(x) f_e(x) with the mask
  m(x) = onehot(top-1) * softmax(s(x) + eps), i.e. the gate kept for the chosen expert and 0 elsewhere;
  written here from that equation (`dense_then_mask_dispatch`, the layer's dispatch), not from its code;
- dgmoe's sorted per-expert dispatch (`dgmoe.moe.dispatch.sorted_autograd_dispatch`, the CPU's path): each
  expert on its own tokens only, its count read back to the host;
- dgmoe's fixed-shape dispatch (`dgmoe.moe.adapter_fixed_shape`, the CUDA path): every expert on every token
  with the gates folded in before the last product, no host reads.

All compute the same function (`tests/bench/test_bench.py`); the dense and fixed-shape forms run N experts per
token, the sorted one k. For KAdaptation experts each forms each expert's weight H_e once per call (MoA's code
does it per expert and call too).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from dgmoe.models.peft import RoutedAdapterLinear, routed_linear
from dgmoe.moe.adapter_experts import PHM_DIM, KroneckerExperts, PHMRule
from dgmoe.moe.adapter_fixed_shape import adapter_fixed_shape_dispatch
from dgmoe.moe.dispatch import Dispatch, sorted_autograd_dispatch
from dgmoe.moe.experts import ExpertBank
from dgmoe.peft.config import PeftConfig


def dense_then_mask_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                             keep: torch.Tensor | None = None) -> torch.Tensor:
    """Every expert on every token, the outputs masked by the gates of the chosen experts (a layer's
    `dispatch_override`: the same router, experts and balance loss as the sparse layer). MoA has no capacity."""
    mask = torch.zeros(x.shape[0], experts.num_experts, device=x.device).scatter(1, expert_idx, gates).to(x.dtype)
    every = torch.stack([experts.expert(e, x) for e in range(experts.num_experts)], dim=1)
    return (mask.unsqueeze(-1) * every).sum(dim=1)


#: candidate name -> (expert kind, the layer's dispatch, forced whatever the device)
MOA_CANDIDATES: dict[str, tuple[str, Dispatch]] = {
    "moa dense-then-mask (MoA's code)": ("kadaptation", dense_then_mask_dispatch),
    "moa sorted per-expert (dgmoe)": ("kadaptation", sorted_autograd_dispatch),
    "moa fixed-shape (dgmoe)": ("kadaptation", adapter_fixed_shape_dispatch),
    "moa-lora dense-then-mask (MoA's code)": ("lora", dense_then_mask_dispatch),
    "moa-lora sorted per-expert (dgmoe)": ("lora", sorted_autograd_dispatch),
    "moa-lora fixed-shape (dgmoe)": ("lora", adapter_fixed_shape_dispatch)}


def moa_layer(candidate: str, dim: int) -> RoutedAdapterLinear:
    """A MoA layer on a fresh d -> 3d projection (random weights from the caller's seed), computed by the
    candidate's dispatch."""
    kind, dispatch = MOA_CANDIDATES[candidate]
    phm = PHM_DIM
    while phm > 1 and dim % phm:
        phm //= 2
    layer = routed_linear(nn.Linear(dim, 3 * dim), PeftConfig("moa", expert=kind), PHMRule(phm))
    layer.weight.requires_grad_(False)
    layer.bias.requires_grad_(False)
    layer.adapter.dispatch_override = dispatch
    bank = layer.adapter.experts
    if isinstance(bank, KroneckerExperts):  # the rule lives outside the layer in a model; keep it with the layer
        layer.add_module("rule", bank.rule)
    return layer
