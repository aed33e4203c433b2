"""The peers' MoE experts, for `dgmoe bench layer` to time beside dgmoe's layer: Hugging Face transformers'
experts forward (its grouped-GEMM implementation, `transformers.integrations.moe.grouped_mm_experts_forward`,
when transformers >= 5 is installed) and a Mixtral-style eager loop written after transformers' eager
experts (one-hot mask, a loop over the experts that received tokens, `index_add_`). Both compute the same
non-gated FFN experts with biases as `dgmoe.moe.experts.Experts`, from a copy of its weights."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.moe.experts import Experts


class PeerExperts(nn.Module):
    """`Experts`' weights under the attribute names transformers' experts implementations read
    (non-gated, with biases, weights stored [N, out, in])."""

    def __init__(self, experts: Experts):
        super().__init__()
        self.num_experts = experts.num_experts
        self.up_proj = nn.Parameter(experts.fc1_weight.detach().clone())
        self.up_proj_bias = nn.Parameter(experts.fc1_bias.detach().clone())
        self.down_proj = nn.Parameter(experts.fc2_weight.detach().clone())
        self.down_proj_bias = nn.Parameter(experts.fc2_bias.detach().clone())
        self.act_fn = nn.GELU()
        self.has_gate, self.has_bias, self.has_post_expert_norm = False, True, False
        self.is_transposed, self.is_concatenated, self._is_expert_parallel = False, True, False

    def eager_loop(self, x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        """The Mixtral-style loop: per expert that was hit, gather its tokens, FFN, gate, scatter-add."""
        out = torch.zeros_like(x)
        with torch.no_grad():
            mask = F.one_hot(expert_idx, num_classes=self.num_experts).permute(2, 1, 0)  # [N, k, T]
            hit = (mask.sum(dim=(-1, -2)) > 0).nonzero()
        for (e,) in hit.tolist():
            slot, token = torch.where(mask[e])
            h = self.act_fn(F.linear(x[token], self.up_proj[e], self.up_proj_bias[e]))
            h = F.linear(h, self.down_proj[e], self.down_proj_bias[e]) * gates[token, slot, None]
            out.index_add_(0, token, h.to(out.dtype))
        return out


def peer_dispatches(experts: Experts) -> dict[str, Callable]:
    """name -> dispatch(x, expert_idx, gates, experts) of each available peer, on a copy of `experts`."""
    peer = PeerExperts(experts).to(experts.fc1_weight.device)
    out: dict[str, Callable] = {"transformers-style eager loop": lambda x, idx, g, _: peer.eager_loop(x, idx, g)}
    try:
        from transformers.integrations.moe import grouped_mm_experts_forward
    except Exception:  # noqa: BLE001 (transformers absent, or older than its experts integration)
        return out
    out["transformers grouped_mm experts"] = lambda x, idx, g, _: grouped_mm_experts_forward(peer, x, idx, g)
    return out
