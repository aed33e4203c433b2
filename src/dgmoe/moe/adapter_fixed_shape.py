"""A fixed-shape dispatch for the adapter-expert banks (`dgmoe.moe.adapter_experts`: LoRA and KAdaptation
experts of heterogeneous ranks, `--peft moa` and `--peft adapter_experts --peft-expert lora|kadaptation`) with
no host reads: every shape is a function of (T, k, N) and the bank's widths, so a GPU never waits for the CPU
(no `bincount`, `.tolist()` or `split` by counts, as the sorted dispatch needs) and torch.compile captures it.

    out[t] = sum_{j < k} keep_{t,j} g_{t,j} f_e(x_t),  e = expert_idx[t, j]   (GMoE eq. 3; MoA's layer)
           = sum_{e < N} w_{t,e} f_e(x_t),             w = the [T, N] combine weights, 0 off each token's top-k

The combine weights come from a comparison one-hot of the chosen experts ([T, k, N], summed over k; `F.one_hot`
validates its indices, a host read on a GPU). Each bank then computes the weighted sum over all its experts
for every token (`AdapterBank.forward_combined`), folding the weights in before its last product: LoRA as
B_cat (w_cols * A_cat x), KAdaptation as [w_1 x, ..., w_N x] @ [H_1; ...; H_N]. The result is exact for every
routing (an expert a token does not use gets weight 0: it adds 0 and receives a zero gradient from that
token), at N/k times the experts' FLOPs: for MoA's KAdaptation (4 experts, top-1) four times a dense
projection's, what MoA's own code computes (every expert on every token, then masked). The padded
alternative of `dgmoe.moe.fixed_shape` (a [N, T, d] buffer of slots) costs the same N*T rows for exactness,
and ranks that differ per expert have no common [N, ...] weight to batch.

Capacity (`keep`) zeroes the weights of dropped assignments, as in `masked_dispatch`. GMoE's FFN experts
(and `--peft adapter_experts`' bottleneck experts, which are an `Experts` bank) take
`dgmoe.moe.fixed_shape` or the Triton kernels instead (`dgmoe.moe.dispatch.choose_path`).
"""
from __future__ import annotations

import torch

from dgmoe.moe.adapter_experts import AdapterBank


def combine_weights(expert_idx: torch.Tensor, gates: torch.Tensor, num_experts: int,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """[T, N] in the gates' dtype: each token's gate on each of its (kept) experts, 0 elsewhere. Device only;
    differentiable in the gates."""
    weights = gates if keep is None else gates * keep
    onehot = expert_idx.unsqueeze(-1) == torch.arange(num_experts, device=expert_idx.device)  # [T, k, N]
    return (onehot.to(weights.dtype) * weights.unsqueeze(-1)).sum(1)


def adapter_fixed_shape_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor,
                                 experts: AdapterBank, keep: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, d_in]; expert_idx, gates [T, k]; keep [T, k] bool or None. Returns [T, d_out] in x's dtype; the
    bank's products run in the autocast dtype when autocast is on, as in the sorted dispatch."""
    if not isinstance(experts, AdapterBank):
        raise TypeError(f"the adapter fixed-shape dispatch runs an adapter bank (LoRAExperts, KroneckerExperts), "
                        f"not {type(experts).__name__}; GMoE's FFN experts take dgmoe.moe.fixed_shape")
    combine = combine_weights(expert_idx, gates, experts.num_experts, keep)
    return experts.forward_combined(x, combine).to(x.dtype)
