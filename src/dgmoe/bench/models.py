"""Whole-model cost (GMoE Table 16, SF-MoE Table 4): train step, inference, peak memory, params, FLOPs.

Times are measured in fresh processes (`--repeats`), each running the models round-robin; a ratio is the
median over rounds of the per-round ratio to the first model, then the median over processes. Peak
memory is measured per model in a fresh subprocess over a training step that follows a first one (so
the optimiser state exists): CUDA `max_memory_allocated`; on CPU the peak of live tensor bytes (see
`_measure_memory_child`).
The compute floor of a model is the reference's step time scaled by the ratio of their training FLOPs.
A train step is ERM's: the task loss plus the sparse layers' auxiliary losses. On a GPU a round is 10
back-to-back steps and one synchronisation (`interleaved_times`), as training runs them.
Every time ratio is printed with the IQR of its per-round ratios over all processes; warnings
(`dgmoe.bench.timing`) flag spreads above 10%, unstable medians, calls under 5 ms and a reference train step
under 1 GFLOP (3x its forward FLOPs: too small to time reliably, whatever the machine).
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from dgmoe.algorithms.base import use_fused_kernel
from dgmoe.bench.config import ModelBenchConfig
from dgmoe.bench.timing import (
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
from dgmoe.models import count_parameters, create_model
from dgmoe.models.compiled import compile_blocks
from dgmoe.moe import aux_losses, clear_aux


def _inputs(model, cfg: ModelBenchConfig):
    x = torch.randn(cfg.batch_size, 3, cfg.img_size, cfg.img_size, device=cfg.device)
    y = torch.randint(cfg.num_classes, (cfg.batch_size,), device=cfg.device)
    kwargs = {}
    if getattr(model, "uses_metadata", False):
        g = torch.Generator().manual_seed(0)
        kwargs["meta"] = {"lat": (torch.rand(cfg.batch_size, generator=g) * 180 - 90).to(cfg.device),
                          "lon": (torch.rand(cfg.batch_size, generator=g) * 360 - 180).to(cfg.device)}
    return x, y, kwargs


def _build(name: str, cfg: ModelBenchConfig):
    """The model on its device; with `compile`, compiled block by block as `dgmoe train --compile` does (a
    `torch.compile` wrapper of the whole module would leave `forward_features`, which is what runs, eager)."""
    model = create_model(name, num_classes=cfg.num_classes, img_size=cfg.img_size,
                         **cfg.model_kwargs.get(name, {})).to(cfg.device)
    return compile_blocks(model, mode=cfg.compile_mode) if cfg.compile else model


def _steps(model, cfg: ModelBenchConfig):
    x, y, kw = _inputs(model, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    if cfg.fused_optimizer:
        use_fused_kernel(opt)
    amp = torch.autocast(device_type=cfg.device.split(":")[0], dtype=torch.bfloat16, enabled=cfg.precision == "bf16")

    graphed = cfg.compile and cfg.compile_mode == "reduce-overhead"

    def train_step() -> None:  # as ERM trains: task loss + the sparse layers' auxiliary losses
        if graphed:  # a new step: the previous step's CUDA graph outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        model.train()
        clear_aux(model)
        with amp:
            loss = F.cross_entropy(model.forward_head(model.forward_features(x, **kw)).float(), y)
            loss = loss + sum(aux_losses(model).values(), torch.zeros((), device=loss.device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clear_aux(model)

    # read by _measure_memory_child
    train_step.optimizer, train_step.inputs = opt, (x, y)  # type: ignore[attr-defined]

    @torch.no_grad()
    def infer() -> None:
        if graphed:
            torch.compiler.cudagraph_mark_step_begin()
        model.eval()
        with amp:
            model.forward_head(model.forward_features(x, **kw))

    return train_step, infer


def training_flops(name: str, cfg: ModelBenchConfig) -> tuple[int, int]:
    """(parameters, forward FLOPs per image) of a model, counted by torch's FlopCounterMode."""
    model: Any = create_model(name, num_classes=cfg.num_classes, img_size=cfg.img_size,  # timm's API
                              **cfg.model_kwargs.get(name, {})).eval()
    one = ModelBenchConfig(**{**asdict(cfg), "batch_size": 1, "device": "cpu", "precision": "fp32", "compile": False,
                              "compile_mode": "default"})  # (counted on the CPU, where tf32 and graphs do not exist)
    x, _, kw = _inputs(model, one)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.forward_head(model.forward_features(x, **kw))
    return count_parameters(model), counter.get_total_flops()


def peak_memory_gb(name: str, cfg: ModelBenchConfig) -> dict[str, float]:
    """Peak memory of a training step of `name` (after a first step has created the optimiser state),
    measured in a fresh process: {"total": GB, "states": weights + gradients + optimiser state, GB}."""
    return run_in_fresh_process("dgmoe.bench.models", {"task": "memory", "name": name, "cfg": asdict(cfg)})


def _measure_memory_child(name: str, cfg: ModelBenchConfig) -> dict[str, float]:
    """CUDA: `max_memory_allocated` over the second step. CPU: the peak of live tensor bytes over the second
    step, tracked per tensor by torch's `MemTracker` (a dispatch mode): the CPU analogue of
    `max_memory_allocated`, free of the allocator's fragmentation that makes resident-set sizes noisy."""
    tune_malloc()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    model = _build(name, cfg)
    train_step, _ = _steps(model, cfg)
    train_step()
    if cfg.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        train_step()
        return {"total": torch.cuda.max_memory_allocated() / 2**30, "states": float("nan")}
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError as err:  # a private module of torch; present from torch 2.5 to at least 2.13
        raise RuntimeError("CPU peak memory needs torch.distributed._tools.mem_tracker.MemTracker, "
                           f"which this torch {torch.__version__} does not have") from err
    tracker = MemTracker()
    tracker.track_external(model, train_step.optimizer, *train_step.inputs)
    with tracker:
        train_step()
    peak = {str(kind).rsplit(".", 1)[-1].lower(): v for kind, v in
            tracker.get_tracker_snapshot("peak")[torch.device(cfg.device)].items()}
    return {"total": peak["total"] / 2**30, "states": (peak["param"] + peak["grad"] + peak["opt"]) / 2**30}


def time_models(cfg: ModelBenchConfig) -> dict[str, dict]:
    """In this process: {model: {"train"/"infer": median seconds, "train_ratio"/"infer_ratio": median over
    rounds of its time / the first model's time in the same round, "train_times"/"infer_times" and
    "train_ratios"/"infer_ratios": the same per round}}."""
    tune_malloc()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    steps = {name: _steps(_build(name, cfg), cfg) for name in cfg.models}
    ref = cfg.models[0]
    result: dict[str, dict] = {n: {} for n in cfg.models}
    for i, kind in enumerate(("train", "infer")):
        times = interleaved_times({n: s[i] for n, s in steps.items()}, rounds=cfg.rounds,
                                  calls=calls_per_round(cfg.device), sync=device_sync(cfg.device))
        for n, ratios in round_ratios(times, ref).items():
            result[n] |= {kind: statistics.median(times[n]), f"{kind}_ratio": statistics.median(ratios),
                          f"{kind}_times": times[n], f"{kind}_ratios": ratios}
    return result


def bench_models(cfg: ModelBenchConfig, repeats: int = 1) -> tuple[list[dict], list[str]]:
    """(table rows, warnings). Rows: parameters, FLOPs, train/inference seconds and ratios to the first model
    (median over `repeats` fresh processes) each with the IQR of its per-round ratios, the min and max of the
    compute-floor ratio over processes, and peak memory (measured once: deterministic, no spread)."""
    with Progress(repeats + len(cfg.models), unit="process", desc="bench models: timing") as progress:
        runs = []
        for _ in range(repeats):
            runs.append(run_in_fresh_process("dgmoe.bench.models", {"task": "time", "cfg": asdict(cfg)}))
            progress.update()
        memory = {}
        for n in cfg.models:
            progress.describe(f"bench models: memory of {n}")
            memory[n] = peak_memory_gb(n, cfg)
            progress.update()
    ref = cfg.models[0]
    counts = {n: training_flops(n, cfg) for n in cfg.models}
    summary = {key: summarize_repeats(runs, key) for key in ("train", "infer", "train_ratio", "infer_ratio")}
    warnings = size_warning(f"a train step of {ref} (batch {cfg.batch_size} at {cfg.img_size} px)",
                            3 * counts[ref][1] * cfg.batch_size)
    rows = []
    for n in cfg.models:
        flops_ratio = counts[n][1] / counts[ref][1]
        floor = {k: v / flops_ratio for k, v in summary["train_ratio"][n].items()}
        pooled = {kind: ([x for r in runs for x in r[n][f"{kind}_ratios"]],
                         [x for r in runs for x in r[n][f"{kind}_times"]],
                         [x for r in runs for x in r[ref][f"{kind}_times"]]) for kind in ("train", "infer")}
        rows.append({"model": n, "params (M)": counts[n][0] / 1e6, "GFLOPs/img (fwd)": counts[n][1] / 1e9,
                     "GMACs/img (fwd)": counts[n][1] / 2e9,
                     "train step (s)": summary["train"][n]["median"],
                     "train vs ref": summary["train_ratio"][n]["median"],
                     "train IQR": Spread.of(pooled["train"][0]).text(),
                     "train vs compute floor": floor["median"], "floor min": floor["min"], "floor max": floor["max"],
                     "inference (s)": summary["infer"][n]["median"],
                     "inference vs ref": summary["infer_ratio"][n]["median"],
                     "inference IQR": Spread.of(pooled["infer"][0]).text(), "peak mem (GB)": memory[n]["total"],
                     "of which weights+grads+optimiser": memory[n]["states"],
                     "mem vs ref": memory[n]["total"] / memory[ref]["total"]})
        if n != ref:
            for kind, label in (("train", "train step"), ("infer", "inference")):
                warnings += timing_warnings(f"{n} {label} vs {ref}", *pooled[kind], calls_per_round(cfg.device))
    return rows, warnings


def _cuda_memory_child(name: str, cfg: ModelBenchConfig, batch_sizes: list[int]) -> dict[str, dict[str, float]]:
    """CUDA, one process for all batch sizes of a model: `max_memory_allocated` over a second step at each
    (a fresh process per cell spent most of its time starting CUDA)."""
    torch.manual_seed(0)
    model, out = _build(name, cfg), {}
    for batch in batch_sizes:
        train_step, _ = _steps(model, ModelBenchConfig(**{**asdict(cfg), "batch_size": batch}))
        train_step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        train_step()
        torch.cuda.synchronize()
        out[str(batch)] = {"total": torch.cuda.max_memory_allocated() / 2**30, "states": float("nan")}
        del train_step
    return out


def bench_memory(cfg: ModelBenchConfig, batch_sizes: tuple[int, ...]) -> list[dict]:
    """Peak training memory of every model at every batch size, as GB and as a ratio to the first model:
    on CUDA one fresh process per model, on the CPU one per model and batch size (`MemTracker`)."""
    cuda = cfg.device.startswith("cuda")
    memory: dict[tuple[int, str], dict[str, float]] = {}
    with Progress(len(cfg.models) * (1 if cuda else len(batch_sizes)), unit="process", desc="bench memory") as bar:
        for n in cfg.models:
            if cuda:
                bar.describe(f"bench memory: {n}")
                spec = {"task": "memory_batches", "name": n, "batches": list(batch_sizes), "cfg": asdict(cfg)}
                for batch, m in run_in_fresh_process("dgmoe.bench.models", spec).items():
                    memory[int(batch), n] = m
                bar.update()
                continue
            for batch in batch_sizes:
                bar.describe(f"bench memory: {n} at batch {batch}")
                memory[batch, n] = peak_memory_gb(n, ModelBenchConfig(**{**asdict(cfg), "batch_size": batch}))
                bar.update()
    rows = []
    for batch in batch_sizes:
        ref = memory[batch, cfg.models[0]]["total"]
        rows += [{"batch": batch, "model": n, "peak mem (GB)": memory[batch, n]["total"],
                  "of which weights+grads+optimiser": memory[batch, n]["states"],
                  "mem vs ref": memory[batch, n]["total"] / ref} for n in cfg.models]
    return rows


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    config = ModelBenchConfig(**{**spec["cfg"], "models": tuple(spec["cfg"]["models"])})
    with fp32_arithmetic(config.precision, config.device):  # TF32 on for tf32, off for fp32 (CUDA)
        if spec["task"] == "time":
            print(json.dumps(time_models(config)))
        elif spec["task"] == "memory_batches":
            print(json.dumps(_cuda_memory_child(spec["name"], config, spec["batches"])))
        else:
            print(json.dumps(_measure_memory_child(spec["name"], config)))
