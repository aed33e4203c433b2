"""The MoE layer against its limit: k dense FFNs over all tokens (the same FLOPs), forward + backward.

    dgmoe bench layer --tokens 6304 --dim 384 --experts 6 --top-k 2 --repeats 3

Candidates, all with the router, its auxiliary loss and gate noise included (training mode): the dropless
paths of `MoEConfig.dispatch` ("grouped" as the layer chooses it for the device, and each of its two
implementations forced: the sync-free grouped GEMM and the sorted per-expert loop), the grouped path with
the official code's capacity 1.5 (token dropping), a Tutel-style capacity dispatch (capacity 1.5, tokens
placed in a fixed [N, C, d] buffer, one batched matmul pair: how Tutel and V-MoE lay out the work), and
the router alone, and the default layer compiled (`torch.compile`, as `dgmoe train --compile` runs it). On CUDA
with triton: the Triton kernels with autotuned tiles and with the fixed 64x64x32 tiles, and compiled (their
custom operators in the graph) beside the compiled fixed-shape padded path.
Without the router, on a fixed routing: the sync-free dispatch and the peers' experts
(`dgmoe.bench.peers`: transformers' grouped-GEMM experts when installed, a transformers-style eager loop).
MoA's layer (`--peft moa`, KAdaptation or LoRA experts on a d -> 3d qkv, top-1; `dgmoe.bench.moa`) as MoA's
code computes it (every expert on every token, then masked), through dgmoe's sorted per-expert dispatch (the
CPU's path) and through its fixed-shape adapter dispatch (the CUDA path, no host reads), each forced, on the
same tokens: compare those rows with each other (the limit stays the FFN layer's).

A round is several back-to-back calls and one device synchronisation on a GPU (`interleaved_times`), so
paths that never synchronise are credited as they run in training.

Next to the times, each candidate's operations per call (forward and backward, views left out, counted
once with a `TorchDispatchMode`): on a GPU about the kernels it launches, and on any machine a measure of
its host cost, the limit of a layer made of many small operations (docs/benchmarks.md, section 12). The
compiled candidate has none: its graphs do not go through the dispatcher operation by operation.

Every candidate is timed in its own fresh processes, round-robin against the limit; its ratio is the
median over rounds of the per-round ratio, then the median over `repeats` processes; next to it, the IQR
of the per-round ratios of all processes and the min/max over processes. Warnings (`dgmoe.bench.timing`)
flag a spread over rounds or processes above 10%, medians that disagree, calls under 5 ms, and problems
under 1 GFLOP per call of the limit (`limit_flops`). One process per
candidate because that is how training runs (one path per process): on the 2-core CPU, sharing a process
with paths that allocate differently shaped buffers slowed the grouped path by about 2%.
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from dataclasses import asdict
from functools import partial
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from dgmoe.bench.config import LayerBenchConfig
from dgmoe.bench.moa import MOA_CANDIDATES, moa_layer
from dgmoe.bench.peers import peer_dispatches
from dgmoe.bench.timing import (
    MAX_SPREAD,
    Spread,
    calls_per_round,
    device_sync,
    interleaved_times,
    round_ratios,
    run_in_fresh_process,
    size_warning,
    summarize_repeats,
    timing_warnings,
    tune_malloc,
)
from dgmoe.devices import fp32_arithmetic
from dgmoe.engine.progress import Progress
from dgmoe.models.layers import Mlp
from dgmoe.moe import MoEConfig, MoEMlp, kernels
from dgmoe.moe.dispatch import expert_capacity, sorted_dispatch, triton_dispatch
from dgmoe.moe.experts import Experts
from dgmoe.moe.fixed_shape import fixed_shape_dispatch
from dgmoe.moe.sync_free import sync_free_dispatch

LIMIT = "limit (k dense FFNs)"
ROUTER = "router alone"
#: MoEConfig overrides of each MoE path (None: capacity 1.5 through `tutel_style_dispatch`)
MOE_PATHS: dict[str, dict[str, Any] | None] = {
    "moe grouped (default)": {}, "moe mask": {"dispatch": "mask"},
    "moe grouped + capacity 1.5": {"capacity_factor": 1.5}, "moe Tutel-style capacity 1.5": None}
def fixed_tile_triton_dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                               keep: torch.Tensor | None = None) -> torch.Tensor:
    """The "triton" path with the fixed 64x64x32 tiles of before autotuning (`dgmoe.moe.kernels.tiles`)."""
    return kernels.expert_dispatch(x, expert_idx, gates, experts, keep, allow_tf32=None, tiles="fixed")


#: the layer (router, noise, balance loss) with one implementation of "grouped" forced, whatever the device;
#: "moe Triton kernels" autotunes its tiles, "... fixed tiles" is the same kernels at 64x64x32
FORCED = {"moe sync-free grouped_mm": sync_free_dispatch, "moe sorted per-expert": sorted_dispatch,
          "moe fixed-shape padded": fixed_shape_dispatch, "moe Triton kernels": triton_dispatch,
          "moe Triton kernels fixed tiles": fixed_tile_triton_dispatch}
#: the default layer compiled with torch.compile (as `dgmoe train --compile` runs it): the router's small
#: operations fuse, and the host launches a few kernels instead of about eighty
COMPILED = "moe grouped (default) compiled"
#: each compiled candidate -> the layer it compiles: the default, and the two paths the chooser weighs for
#: compiled CUDA fp32/TF32 (the Triton kernels' custom operators, captured in the graph, and the padded path
#: that compiled fp32 took before them)
COMPILED_CANDIDATES = {COMPILED: "moe grouped (default)", "moe Triton kernels compiled": "moe Triton kernels",
                       "moe fixed-shape padded compiled": "moe fixed-shape padded"}
#: the candidates that need triton and a CUDA device (the interpreter would time Python, not kernels)
TRITON_CANDIDATES = ("moe Triton kernels", "moe Triton kernels fixed tiles", "moe Triton kernels compiled")
#: the dispatch alone (no router), on a fixed routing: dgmoe's sync-free path and the peers' experts
DISPATCH_ONLY = ("dispatch sync-free grouped_mm", "transformers-style eager loop", "transformers grouped_mm experts")
CANDIDATES = (*MOE_PATHS, *COMPILED_CANDIDATES, *FORCED, *DISPATCH_ONLY, ROUTER, *MOA_CANDIDATES)


def tutel_style_dispatch(config: MoEConfig) -> Callable[..., torch.Tensor]:
    """Capacity dispatch into a fixed [N, capacity, d] buffer (what Tutel and V-MoE compute), for a layer built
    with `config` (a capacity factor) as its `dispatch_override`."""
    assert config.capacity_factor is not None
    factor = config.capacity_factor

    def dispatch(x: torch.Tensor, expert_idx: torch.Tensor, gates: torch.Tensor, experts: Experts,
                 keep: torch.Tensor | None = None) -> torch.Tensor:
        slots = expert_capacity(x.shape[0], config.num_experts, config.top_k, factor)
        return fixed_shape_dispatch(x, expert_idx, gates, experts, keep, slots=slots)
    return dispatch


def limit_flops(cfg: LayerBenchConfig) -> float:
    """Floating-point operations of one call of the limit: k dense FFNs (d -> 4d -> d) over T tokens, forward
    (2 matmuls of 2 T k d 4d each) and backward (twice the forward)."""
    return 3 * 2 * (2 * cfg.tokens * cfg.top_k * cfg.dim * 4 * cfg.dim)


def _moe_layer(name: str, cfg: LayerBenchConfig) -> MoEMlp:
    base: dict[str, Any] = dict(num_experts=cfg.experts, top_k=cfg.top_k, router=cfg.router)
    if name in FORCED:
        return MoEMlp(cfg.dim, 4 * cfg.dim, MoEConfig(**base), dispatch_override=FORCED[name])
    overrides = MOE_PATHS[name]
    if overrides is None:
        config = MoEConfig(**base, capacity_factor=1.5)
        return MoEMlp(cfg.dim, 4 * cfg.dim, config, dispatch_override=tutel_style_dispatch(config))
    return MoEMlp(cfg.dim, 4 * cfg.dim, MoEConfig(**base, **overrides))


def _fwd_bwd(module: nn.Module, x: torch.Tensor, amp, compiled: bool = False) -> Callable[[], None]:
    forward = torch.compile(module) if compiled else module  # as compile_blocks compiles a block

    def run() -> None:
        x.grad = None
        module.zero_grad(set_to_none=True)
        with amp():
            loss = forward(x).float().sum()
            for layer in (m for m in module.modules() if isinstance(m, MoEMlp)):
                loss = loss + sum(layer.aux_losses().values())
                layer.clear_aux()
        loss.backward()
    return run


def _router_only(layer: MoEMlp, x: torch.Tensor, amp) -> Callable[[], None]:
    def run() -> None:
        x.grad = None
        layer.zero_grad(set_to_none=True)
        with amp():
            routing = layer.router.route(x)
            loss = routing.gates.sum() + layer.router.balance_loss(routing)
        loss.backward()
    return run


def _dispatch_only(name: str, cfg: LayerBenchConfig, x: torch.Tensor, amp) -> Callable[[], None]:
    """Forward + backward of a dispatch on a fixed routing (renormalised top-k of random logits)."""
    experts = Experts(cfg.experts, cfg.dim, 4 * cfg.dim).to(x.device)
    gates, idx = torch.randn(cfg.tokens, cfg.experts, device=x.device).softmax(-1).topk(cfg.top_k, dim=-1)
    gates = (gates / gates.sum(-1, keepdim=True)).requires_grad_(True)
    dispatch = sync_free_dispatch if name == "dispatch sync-free grouped_mm" else peer_dispatches(experts).get(name)
    if dispatch is None:
        raise ValueError(f"{name} is not available here (it needs transformers >= 5 with its experts integration)")

    def run() -> None:
        x.grad = gates.grad = None
        experts.zero_grad(set_to_none=True)
        with amp():
            y = dispatch(x, idx, gates, experts)
        y.float().sum().backward()
    return run


class ComputingOperations(TorchDispatchMode):
    """Counts, by name, the operations that reach the dispatcher inside the block and compute: views
    (reshapes, transposes, detach) are left out, as they launch nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if not func.is_view:
            self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def operations_per_call(run: Callable[[], None]) -> int:
    """The computing operations of one call of `run` (after a first call, which may initialise)."""
    run()
    with ComputingOperations() as counter:
        run()
    return counter.counts.total()


def available_candidates(device: str = "cpu") -> tuple[str, ...]:
    """`CANDIDATES` that can run on `device` here (the transformers peer needs transformers installed; the Triton
    kernels need triton and CUDA)."""
    left_out: set[str] = set()
    try:
        from transformers.integrations.moe import grouped_mm_experts_forward  # noqa: F401
    except Exception:  # noqa: BLE001
        left_out.add("transformers grouped_mm experts")
    if not device.startswith("cuda") or not kernels.available():
        left_out.update(TRITON_CANDIDATES)
    return tuple(c for c in CANDIDATES if c not in left_out)


def bench_moe_layer(cfg: LayerBenchConfig, candidate: str) -> dict[str, dict]:
    """In this process: {name: {"seconds": median, "ratio": median per-round ratio to the limit, "times":
    seconds per round, "ratios": ratio per round}} for the limit and `candidate` (one of `CANDIDATES`)."""
    if candidate not in CANDIDATES:
        raise ValueError(f"unknown candidate {candidate!r}; valid: {', '.join(CANDIDATES)}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    device = torch.device(cfg.device)
    amp = partial(torch.autocast, device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16")
    x = torch.randn(cfg.tokens, cfg.dim, device=device, requires_grad=True)
    x_k = torch.randn(cfg.tokens * cfg.top_k, cfg.dim, device=device, requires_grad=True)
    dense = Mlp(cfg.dim, 4 * cfg.dim).to(device)
    torch.manual_seed(1)  # every candidate gets the same router and experts
    if candidate == ROUTER:
        run = _router_only(_moe_layer("moe grouped (default)", cfg).to(device).train(), x, amp)
    elif candidate in COMPILED_CANDIDATES:
        run = _fwd_bwd(_moe_layer(COMPILED_CANDIDATES[candidate], cfg).to(device).train(), x, amp, compiled=True)
    elif candidate in DISPATCH_ONLY:
        run = _dispatch_only(candidate, cfg, x, amp)
    elif candidate in MOA_CANDIDATES:
        run = _fwd_bwd(moa_layer(candidate, cfg.dim).to(device).train(), x, amp)
    else:
        run = _fwd_bwd(_moe_layer(candidate, cfg).to(device).train(), x, amp)
    runs = {LIMIT: _fwd_bwd(dense, x_k, amp), candidate: run}
    operations = {n: None if n in COMPILED_CANDIDATES else operations_per_call(r) for n, r in runs.items()}
    times = interleaved_times(runs, rounds=cfg.rounds, calls=calls_per_round(cfg.device), sync=device_sync(cfg.device))
    ratios = round_ratios(times, LIMIT)
    return {n: {"seconds": statistics.median(t), "ratio": statistics.median(ratios[n]), "times": t,
                "ratios": ratios[n], "operations": operations[n]} for n, t in times.items()}


def bench_moe_layer_repeated(cfg: LayerBenchConfig, repeats: int,
                             candidates: tuple[str, ...] | None = None) -> tuple[list[dict], list[str]]:
    """(table rows, warnings). Rows: median seconds, the median ratio to the limit, the IQR of the per-round
    ratios over all processes, and the min and max over `repeats` fresh processes (run repeat-major, so slow
    drifts of the machine spread over all candidates). Warnings: see the module docstring. `candidates`
    defaults to every available one."""
    candidates = available_candidates(cfg.device) if candidates is None else candidates
    runs: dict[str, list[dict]] = {c: [] for c in candidates}
    with Progress(repeats * len(candidates), unit="process", desc="bench layer") as progress:
        for _ in range(repeats):
            for c in candidates:
                progress.describe(f"bench layer: {c}")
                runs[c].append(run_in_fresh_process("dgmoe.bench.layer", {"cfg": asdict(cfg), "candidate": c}))
                progress.update()
    limit_seconds = statistics.median(r[LIMIT]["seconds"] for rs in runs.values() for r in rs)
    limit_operations = runs[candidates[0]][0][LIMIT]["operations"]
    rows = [{"path": LIMIT, "seconds": limit_seconds, "ratio to limit": 1.0, "IQR over rounds": "1.000-1.000",
             "min": 1.0, "max": 1.0, "operations per call": limit_operations}]
    warnings = size_warning(f"the limit at T={cfg.tokens}, d={cfg.dim}, k={cfg.top_k}", limit_flops(cfg))
    for c, rs in runs.items():
        seconds, ratio = summarize_repeats(rs, "seconds")[c], summarize_repeats(rs, "ratio")[c]
        per_round = [x for r in rs for x in r[c]["ratios"]]
        operations = rs[0][c]["operations"]
        rows.append({"path": c, "seconds": seconds["median"], "ratio to limit": ratio["median"],
                     "IQR over rounds": Spread.of(per_round).text(), "min": ratio["min"], "max": ratio["max"],
                     "operations per call": "n/a (compiled)" if operations is None else operations})
        warnings += timing_warnings(c, per_round, [x for r in rs for x in r[c]["times"]],
                                    [x for r in rs for x in r[LIMIT]["times"]], calls_per_round(cfg.device))
        if ratio["max"] > (1 + MAX_SPREAD) * ratio["min"]:
            warnings.append(f"{c}: the ratio differs between processes ({ratio['min']:.3f}-{ratio['max']:.3f}): "
                            "memory placement or machine load; add --repeats")
    return rows, warnings


if __name__ == "__main__":
    tune_malloc()
    spec = json.loads(sys.argv[1])
    layer_cfg = LayerBenchConfig(**spec["cfg"])
    with fp32_arithmetic(layer_cfg.precision, layer_cfg.device):  # TF32 on for tf32, off for fp32 (CUDA)
        print(json.dumps(bench_moe_layer(layer_cfg, spec["candidate"])))
