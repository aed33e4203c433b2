"""Token dispatch: send each token to its k experts, combine the gated outputs (GMoE eq. 3,
y(x) = sum_{e in TOP_k} g_e(x) f_e(x), on the decision of the gate, `dgmoe.moe.gate`).

The paths (`DispatchPath`), all computing the same sum; `choose_path` alone says which one runs:
- "sorted_fused": one stable sort of the T*k (token, expert) assignments by expert, one matmul pair per expert
  on its contiguous slice of the sorted rows in the fused `GroupedExpertFFN` (hand-written backward: memory
  of a dense FFN over the T*k assignments, no concatenations), the gate multiply and one scatter-add; no
  [T, E] one-hot, no boolean mask per expert. Fastest on a quiet 2-core CPU (docs/benchmarks.md, section 4).
- "sorted_autograd": the same through plain autograd; supports double backward (`twice_differentiable()`,
  algorithms that differentiate gradients, e.g. IGA), expert dropout, any activation and, off CUDA, the adapter
  banks of `dgmoe.moe.adapter_experts` (experts of their own shapes, d_in -> d_out), and keeps no [T*k, hidden]
  buffer alive across experts without gradients (inference).
- "sync_free": `dgmoe.moe.sync_free.sync_free_dispatch`, fixed shapes and no host synchronisation
  (grouped GEMMs with device-side offsets), where torch's grouped GEMM is one fused kernel (CUDA SM90+,
  bf16) and under torch.compile in bf16, where the graph captures it.
- "triton": `dgmoe.moe.kernels.expert_dispatch`, the experts as Triton gather-GEMM and GEMM-scatter kernels
  (the gather, bias, activation, gate multiply and un-permute fused into the GEMMs; no host reads; tiles
  autotuned per shape), on CUDA where triton is installed, eager or compiled (the kernels are custom operators
  that torch.compile captures in its graph), for GELU and QuickGELU experts without expert dropout or double
  backward; fp32 products in TF32 where the user allowed it (`--precision tf32`).
- "fixed_shape": `dgmoe.moe.fixed_shape.fixed_shape_dispatch`, a padded batched GEMM whose shapes depend only
  on (T, k, N): every other CUDA call (no host synchronisation in fp32, TF32 or on GPUs without a fused
  grouped GEMM; captured whole by torch.compile), at N/k times the experts' FLOPs.
- "adapter_fixed_shape": `dgmoe.moe.adapter_fixed_shape.adapter_fixed_shape_dispatch`, the adapter banks'
  path on CUDA: every expert on every token weighted by the [T, N] combine weights (shapes fixed by (T, k, N),
  no host reads, captured by torch.compile), at N/k times the experts' FLOPs.
- "mask" (the `MoEConfig.dispatch='mask'` option): the straightforward reference the others are tested
  against.
`MoEConfig.dispatch='grouped'` (the default) is every path but the reference. How the gate computes the
decision the paths run on (the fused Triton router or torch ops) is the gate's own question
(`dgmoe.moe.gate.fused_router_applies`), independent of the expert path. Under torch.compile the paths
other than "sync_free", "fixed_shape", "adapter_fixed_shape" and "triton" have shapes that depend on the routing and
run eagerly between graphs.
`capacity_keep_mask` reproduces the official code's capacity with token dropping and batch-prioritised
routing (Riquelme et al. 2021).
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Literal

import torch

from dgmoe.moe import kernels
from dgmoe.moe.adapter_fixed_shape import adapter_fixed_shape_dispatch
from dgmoe.moe.experts import ExpertBank, Experts
from dgmoe.moe.fixed_shape import fixed_shape_dispatch
from dgmoe.moe.fused import GroupedExpertFFN
from dgmoe.moe.sync_free import GROUPED_MM, fast_grouped_gemm, sync_free_dispatch
from dgmoe.scope import SCOPE, scoped

DispatchPath = Literal["sync_free", "triton", "fixed_shape", "sorted_fused", "sorted_autograd", "mask",
                       "adapter_fixed_shape"]
#: the paths with fixed shapes, which torch.compile captures in its graph (the others run eagerly between graphs);
#: "triton" through its custom operators (`dgmoe.moe.kernels.experts`)
CAPTURED: frozenset[DispatchPath] = frozenset({"sync_free", "fixed_shape", "adapter_fixed_shape", "triton"})
#: a dispatch: (x [T, d], expert_idx [T, k], gates [T, k], experts, keep [T, k] or None) -> [T, d_out]
Dispatch = Callable[..., torch.Tensor]


@contextlib.contextmanager
def twice_differentiable() -> Iterator[None]:
    """Forwards inside the block take the plain-autograd expert path, whose graph supports double backward
    (the fused `GroupedExpertFFN` does not)."""
    with scoped(twice_differentiable=True):
        yield


@dataclass(frozen=True)
class DispatchNeeds:
    """What a layer's call asks of its dispatch, as plain values (so that the choice is testable anywhere).

    option: `MoEConfig.dispatch` ('grouped' or the 'mask' reference); ffn_experts: GMoE's FFN bank
    (`Experts`), False for an adapter bank; activation: the experts' (`ACTIVATIONS`); grad: gradients are
    recorded; expert_dropout: dropout on the experts' hidden activation is active; twice_differentiable:
    inside `twice_differentiable()`; grouped_mm: torch has a grouped GEMM (torch >= 2.8); fused_grouped_gemm:
    it is one fused kernel for this device and dtype (`fused_grouped_gemm`); triton: the Triton kernels of
    `dgmoe.moe.kernels` run on this device (a CUDA device, with triton installed)."""

    option: str = "grouped"
    ffn_experts: bool = True
    activation: str = "gelu"
    grad: bool = True
    expert_dropout: bool = False
    twice_differentiable: bool = False
    grouped_mm: bool = GROUPED_MM is not None
    fused_grouped_gemm: bool = False
    triton: bool = False


#: a rule: (device type, compute dtype, compiling, needs) -> the path it picks, or None to pass
Rule = Callable[[str, torch.dtype, bool, DispatchNeeds], "DispatchPath | None"]


def _reference(device_type: str, dtype: torch.dtype, compiling: bool, needs: DispatchNeeds) -> DispatchPath | None:
    return "mask" if needs.option == "mask" else None


def _adapter_bank(device_type: str, dtype: torch.dtype, compiling: bool, needs: DispatchNeeds) -> DispatchPath | None:
    """Adapter banks (experts of their own shapes: no grouped GEMM): on CUDA the fixed-shape combine (no host
    reads; the sorted loop reads its counts back), elsewhere the sorted autograd loop (k of N experts' FLOPs)."""
    if needs.ffn_experts:
        return None
    return "adapter_fixed_shape" if device_type == "cuda" else "sorted_autograd"


def _compiled_bf16(device_type: str, dtype: torch.dtype, compiling: bool, needs: DispatchNeeds) -> DispatchPath | None:
    return "sync_free" if compiling and needs.grouped_mm and dtype == torch.bfloat16 else None  # one graph


def _fused_gemm(device_type: str, dtype: torch.dtype, compiling: bool, needs: DispatchNeeds) -> DispatchPath | None:
    return "sync_free" if not compiling and needs.fused_grouped_gemm else None


def _triton_kernels(device_type: str, dtype: torch.dtype, compiling: bool,
                    needs: DispatchNeeds) -> DispatchPath | None:
    """The fused Triton experts on CUDA, for what they implement (one backward, no expert dropout), eager or
    compiled: their custom operators are captured in the graph, so compiled fp32/TF32 (and fp16) calls run them
    instead of the padded path's N/k times the FLOPs (compiled bf16 takes the grouped GEMM first, by
    `_compiled_bf16`). Which of the kernels and the fixed-shape path is faster has not been measured on a GPU
    (docs/benchmarks.md, section 12); the order follows the FLOPs."""
    fits = (needs.activation in kernels.FUSED_ACTIVATIONS and not needs.expert_dropout
            and not needs.twice_differentiable and dtype in (torch.float32, torch.bfloat16, torch.float16))
    return "triton" if device_type == "cuda" and needs.triton and fits else None


def _cuda_fixed_shape(device_type: str, dtype: torch.dtype, compiling: bool,
                      needs: DispatchNeeds) -> DispatchPath | None:
    """Every other CUDA call of the FFN experts: no host synchronisation (the sorted paths read counts back)."""
    return "fixed_shape" if device_type == "cuda" else None


def _autograd_needed(device_type: str, dtype: torch.dtype, compiling: bool,
                     needs: DispatchNeeds) -> DispatchPath | None:
    """What only the autograd path implements (double backward, expert dropout, another activation than
    GELU, whose backward the fused function hand-writes) and inference (no [T*k, hidden] buffer kept)."""
    if not needs.grad or needs.expert_dropout or needs.twice_differentiable or needs.activation != "gelu":
        return "sorted_autograd"
    return None


#: the rules in order; the first that picks a path wins, "sorted_fused" if none does
RULES: tuple[Rule, ...] = (_reference, _adapter_bank, _compiled_bf16, _fused_gemm, _triton_kernels, _cuda_fixed_shape,
                           _autograd_needed)


def choose_path(device_type: str, dtype: torch.dtype, compiling: bool, needs: DispatchNeeds) -> DispatchPath:
    """The one answer to "which path runs": for a call on `device_type` ('cpu', 'cuda', ...) computing in
    `dtype` (`dgmoe.moe.experts.compute_dtype`), traced by torch.compile or not, with the layer's `needs`."""
    for rule in RULES:
        path = rule(device_type, dtype, compiling, needs)
        if path is not None:
            return path
    return "sorted_fused"


@functools.cache
def fused_grouped_gemm(device: torch.device, dtype: torch.dtype) -> bool:
    """`dgmoe.moe.sync_free.fast_grouped_gemm`, once per device and dtype (it asks the device)."""
    return fast_grouped_gemm(device, dtype)


def layer_needs(option: str, experts: ExpertBank, x: torch.Tensor, dtype: torch.dtype,
                compiling: bool) -> DispatchNeeds:
    """The needs of a call of a layer configured with `option` on its `experts` with tokens `x`. The cached
    question to the device `fused_grouped_gemm` is asked only outside torch.compile, whose rules do not read it;
    `kernels.available` (whether triton imports) is a constant torch.compile reads under a guard."""
    grad, twice = torch.is_grad_enabled(), SCOPE.twice_differentiable
    if not isinstance(experts, Experts):
        return DispatchNeeds(option, ffn_experts=False, grad=grad, twice_differentiable=twice)
    return DispatchNeeds(option, activation=experts.activation, grad=grad, twice_differentiable=twice,
                         expert_dropout=experts.training and experts.drop.p > 0,
                         fused_grouped_gemm=not compiling and fused_grouped_gemm(x.device, dtype),
                         triton=x.device.type == "cuda" and kernels.available())


def sorted_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """The "sorted_fused" path. x [T, d]; expert_idx, gates [T, k]; keep [T, k] bool (None keeps every
    assignment). GMoE's FFN experts with GELU and a single backward only (`choose_path` says when)."""
    if not isinstance(experts, Experts) or experts.activation != "gelu":
        raise ValueError("the fused sorted dispatch runs GMoE's FFN experts with GELU only; other banks and "
                         "activations take sorted_autograd_dispatch")
    _, gate_sorted, token_sorted, counts = kept_assignments_by_expert(expert_idx, gates, keep, experts.num_experts)
    return GroupedExpertFFN.apply(x, token_sorted, gate_sorted, counts.tolist(), experts.fc1_weight,
                                  experts.fc1_bias, experts.fc2_weight, experts.fc2_bias)


def sorted_autograd_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                             keep: torch.Tensor | None = None) -> torch.Tensor:
    """`sorted_dispatch` through plain autograd (supports double backward and expert dropout)."""
    _, gate_sorted, token_sorted, counts = kept_assignments_by_expert(expert_idx, gates, keep, experts.num_experts)
    y = experts.forward_grouped(x.index_select(0, token_sorted), counts.tolist())
    y = y * gate_sorted.unsqueeze(1).to(y.dtype)
    return x.new_zeros(x.shape[0], experts.out_features).index_add_(0, token_sorted, y.to(x.dtype))


def kept_assignments_by_expert(expert_idx: torch.Tensor, gates: torch.Tensor, keep: torch.Tensor | None,
                               num_experts: int):
    """Drops the assignments `keep` refuses and groups the rest by expert: (expert, gate and token of each
    kept assignment, sorted by expert (stable: token order within an expert), assignments per expert). The
    host-synced paths read the counts; the sync-free path groups with `sync_free.expert_permutation`."""
    k = expert_idx.shape[1]
    flat_expert = expert_idx.reshape(-1)
    flat_gate = gates.reshape(-1)
    token_of = torch.arange(expert_idx.shape[0], device=expert_idx.device).repeat_interleave(k)
    if keep is not None:
        kept = keep.reshape(-1)
        flat_expert, flat_gate, token_of = flat_expert[kept], flat_gate[kept], token_of[kept]
    order = torch.argsort(flat_expert, stable=True)
    counts = torch.bincount(flat_expert, minlength=num_experts)
    return flat_expert[order], flat_gate[order], token_of[order], counts


def masked_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """Reference: loop over experts with boolean masks (slow; tests and benchmarks only)."""
    if keep is not None:
        gates = gates * keep
    out = x.new_zeros(x.shape[0], experts.out_features)
    for e in range(experts.num_experts):
        weight = (gates * (expert_idx == e)).sum(dim=1)
        rows = (expert_idx == e).any(dim=1) if keep is None else ((expert_idx == e) & keep).any(dim=1)
        if rows.any():
            out[rows] += weight[rows].unsqueeze(1).to(x.dtype) * experts.expert(e, x[rows])
    return out


def expert_capacity(num_tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    """Slots per expert, as the official code: k * int(factor * ceil(T / N))."""
    return top_k * int(capacity_factor * math.ceil(num_tokens / num_experts))


def capacity_keep_mask(expert_idx: torch.Tensor, gates: torch.Tensor, num_experts: int, capacity: int,
                       batch_prioritized: bool = True) -> torch.Tensor:
    """Which (token, choice) assignments get a slot. Choices fill slot-major (every token's first choice
    before any second choice); within a choice, tokens go in order of their top gate when
    `batch_prioritized`, else in token order."""
    num_tokens, k = expert_idx.shape
    if batch_prioritized:
        order = torch.argsort(gates[:, 0], descending=True, stable=True)
    else:
        order = torch.arange(num_tokens, device=expert_idx.device)
    slot_major = expert_idx[order].t().reshape(-1)
    # one-hot by comparison: F.one_hot validates the indices, a host synchronisation on a GPU
    onehot = (slot_major.unsqueeze(1) == torch.arange(num_experts, device=slot_major.device)).long()
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1
    keep_sorted = (position < capacity).view(k, num_tokens)
    keep = torch.empty(k, num_tokens, dtype=torch.bool, device=expert_idx.device)
    keep[:, order] = keep_sorted
    return keep.t()


#: the function of each path
def triton_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: ExpertBank,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """The "triton" path: `dgmoe.moe.kernels.expert_dispatch`, fp32 products in TF32 where torch's fp32 matmuls
    may use it (`dgmoe.devices.tf32_matmuls`, switched on by `--precision tf32`), read by the kernels' operators
    when they run (torch.compile cannot trace the switch)."""
    return kernels.expert_dispatch(x, expert_idx, gates, experts, keep, allow_tf32=None)


PATHS: dict[DispatchPath, Dispatch] = {"sync_free": sync_free_dispatch, "triton": triton_dispatch,
                                       "fixed_shape": fixed_shape_dispatch, "sorted_fused": sorted_dispatch,
                                       "sorted_autograd": sorted_autograd_dispatch, "mask": masked_dispatch,
                                       "adapter_fixed_shape": adapter_fixed_shape_dispatch}
#: `PATHS` hidden from torch.compile (made by `prepare_uncompiled` at a layer's construction, so that importing
#: dgmoe does not import torch._dynamo): the paths whose shapes depend on the routing run eagerly between graphs.
_UNCOMPILED: dict[DispatchPath, Dispatch] = {}


def prepare_uncompiled() -> None:
    if not _UNCOMPILED:
        _UNCOMPILED.update({path: torch.compiler.disable(fn) for path, fn in PATHS.items() if path not in CAPTURED})


def path_function(path: DispatchPath, compiling: bool) -> Dispatch:
    """The function that runs `path`: under torch.compile, eagerly between graphs unless it is `CAPTURED`."""
    return _UNCOMPILED[path] if compiling and path not in CAPTURED else PATHS[path]
