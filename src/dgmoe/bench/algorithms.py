"""Training cost of each algorithm relative to ERM on the same backbone (the form of GMoE Table 16).

Method (CPU): every algorithm runs in its own worker process, all of a group built before timing starts, so that
each process's peak memory is its own; the parent then interleaves single training steps round-robin
(the order rotates every round) so that load from other programs on the machine hits all algorithms
alike. Step time is the mean wall time of `algorithm.update` over the timed rounds (after warm-up rounds);
an even number of timed rounds averages DANN's alternating discriminator/backbone steps. Peak memory is the
worker's peak resident set size (`ru_maxrss`) minus its resident size just before the backbone is built,
i.e. everything training allocates: weights, gradients, optimiser state, the algorithm's copies and
buffers, activations (and allocator slack, which RSS cannot separate). Before the baseline each worker runs
one update of the same algorithm on a miniature copy of the backbone, so library code that is paged in
on first use is not counted; after every step a worker returns freed heap to the OS (`malloc_trim`,
outside the timed region) so that idle workers hold only their persistent state. Penalty warm-ups are switched off
(`*_anneal_iters = 0`, `sma_start_iter = 0`) so the timed steps pay the full penalty. SWAD's per-checkpoint
work (`on_checkpoint`) and evaluation are not part of a training step. On a CUDA device the same function
reports `torch.cuda.max_memory_allocated` instead of RSS.

At most `group_size` workers are alive at once (each holds a backbone, its optimiser state and torch): the
algorithms are measured in groups, each with its own ERM worker, and every ratio is to the ERM whose rounds
were interleaved with it (the ERM row is the first group's). Every batch carries a latitude and longitude per
image, which only metadata-routed models and algorithms read. An algorithm that refuses the backbone (MoGE
on a network without image-routed experts) is reported with its reason instead of a measurement.

At least `MIN_ROUNDS` timed steps after at least one warm-up step are required (`BenchmarkConfig`); the
table prints, next to each step-time ratio, the IQR of the per-round ratios to ERM, and `cost_warnings`
flags ratios whose rounds disagree by more than 10% of the median (DANN and CDANN alternate between a
discriminator step and a full step, so theirs is wide by design), unstable medians and steps under 5 ms.
"""
from __future__ import annotations

import multiprocessing as mp
import resource
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

from dgmoe.bench.config import BenchmarkConfig
from dgmoe.bench.timing import Spread, timing_warnings
from dgmoe.devices import resolve_device
from dgmoe.document import Cell, Table, Text
from dgmoe.engine.progress import Progress

WARMUP_OFF = {"irm_penalty_anneal_iters": 0, "vrex_penalty_anneal_iters": 0, "penalty_anneal_iters": 0,
              "rdm_penalty_anneal_iters": 0, "sma_start_iter": 0}
WARMUP_OFF.update({"ib_penalty_anneal_iters": 0, "eqrm_burnin_iters": 0})  # IB_ERM, IB_IRM, EQRM
WARMUP_OFF.update({"iters": 0, "linear_steps": -1, "ermpp_sma_start_iter": 0})  # TRM, ERM++: full steps from the first


@dataclass(frozen=True)
class AlgorithmCost:
    """One algorithm's measurement; `erm_*`: the ERM measured in the same group (empty: the table's ERM row);
    `unsupported`: why the algorithm refused the backbone (nothing measured)."""

    algorithm: str
    step_time_s: float
    peak_memory_mb: float
    step_times_s: tuple[float, ...]
    erm_step_times_s: tuple[float, ...] = ()
    erm_peak_memory_mb: float | None = None
    unsupported: str = ""

    @classmethod
    def refused(cls, algorithm: str, reason: str) -> "AlgorithmCost":
        return cls(algorithm, float("nan"), float("nan"), (), unsupported=reason)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _warm_up(config: BenchmarkConfig, name: str, batches: list) -> None:
    """One update of the same algorithm on a miniature backbone, so that lazily loaded library code and
    lazy imports are resident before the baseline is taken; then return freed heap to the OS."""
    import gc

    import torch

    from dgmoe.algorithms import get_algorithm
    from dgmoe.data.base import Batch
    from dgmoe.engine.hparams import default_hparams
    from dgmoe.models import create_model
    from dgmoe.models.info import model_info

    small = dict(config.model_overrides)
    if config.backbone.startswith(("vit", "deit", "gmoe", "sfmoe")):  # same depth and layout, 16 wide
        small.update(embed_dim=16, num_heads=2)
    patch: dict[str, Any] = {} if config.patch_size is None else {"patch_size": config.patch_size}
    network = create_model(config.backbone, num_classes=config.num_classes, img_size=config.img_size, **patch,
                           **small)
    hp = default_hparams(name, "PACS", model_info(network))
    hp.update({k: v for k, v in WARMUP_OFF.items() if k in hp})
    algorithm = get_algorithm(name)(network, config.num_classes, config.domains, hp).to(batches[0].x.device)
    algorithm.update([Batch(b.x[:2], b.y[:2], {k: v[:2] for k, v in (b.meta or {}).items()}) for b in batches], 0)
    del algorithm, network
    gc.collect()
    trim = _malloc_trim() if torch.device(config.device).type == "cpu" else None
    if trim is not None:
        trim(0)


def _malloc_trim():
    """glibc's malloc_trim, or None elsewhere."""
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _worker(conn, config: BenchmarkConfig, name: str) -> None:
    import torch

    from dgmoe.algorithms import get_algorithm
    from dgmoe.data.base import Batch
    from dgmoe.engine.hparams import default_hparams
    from dgmoe.models import create_model
    from dgmoe.models.info import model_info

    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    g = torch.Generator().manual_seed(config.seed)
    shape = (config.batch_per_domain, 3, config.img_size, config.img_size)
    batches = [Batch(torch.randn(shape, generator=g), torch.randint(0, config.num_classes, shape[:1], generator=g),
                     {"lat": torch.rand(shape[0], generator=g) * 160 - 80,
                      "lon": torch.rand(shape[0], generator=g) * 340 - 170}).to(device)
               for _ in range(config.domains)]
    try:
        _warm_up(config, name, batches)
    except ValueError as e:  # the algorithm refuses this backbone: say why instead of measuring
        conn.send(("unsupported", str(e)))
        conn.close()
        return
    baseline = _rss_bytes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
    patch: dict[str, Any] = {} if config.patch_size is None else {"patch_size": config.patch_size}
    network = create_model(config.backbone, num_classes=config.num_classes, img_size=config.img_size, **patch,
                           **dict(config.model_overrides))
    hp = default_hparams(name, "PACS", model_info(network))
    hp.update({k: v for k, v in WARMUP_OFF.items() if k in hp})
    algorithm = get_algorithm(name)(network, config.num_classes, config.domains, hp).to(device).train()
    trim = _malloc_trim() if device.type == "cpu" else None
    conn.send("ready")
    step = 0
    while True:
        cmd = conn.recv()
        if cmd == "step":
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            algorithm.update(batches, step)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - start
            if trim is not None:  # hand freed activations back to the OS while the other workers run
                trim(0)
            conn.send(elapsed)
            step += 1
        elif cmd == "memory":
            if device.type == "cuda":
                peak = torch.cuda.max_memory_allocated(device)
            else:
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            conn.send((peak - baseline) / 2**20)
        else:
            conn.close()
            return


def benchmark_algorithms(config: BenchmarkConfig) -> list[AlgorithmCost]:
    """Measure every algorithm of `config` on its backbone, in groups that each hold an ERM worker (see the
    module docstring); the results follow `config.algorithms`' order."""
    from dgmoe.algorithms import get_algorithm

    config = replace(config, device=resolve_device(config.device))
    for name in config.algorithms:
        get_algorithm(name)  # unknown names fail here, with the registry's list of valid ones
    others = [n for n in dict.fromkeys(config.algorithms) if n != "ERM"]
    size = config.group_size - 1
    groups = [others[i:i + size] for i in range(0, len(others), size)] or [[]]
    progress = Progress(len(groups) * (config.warmup + config.steps), unit="round", desc="algorithms bench")
    measured: dict[str, AlgorithmCost] = {}
    for group in groups:
        costs = _measure_group(config, ["ERM", *group], progress)
        erm = costs["ERM"]
        measured.setdefault("ERM", erm)
        for name in group:
            measured[name] = replace(costs[name], erm_step_times_s=erm.step_times_s,
                                     erm_peak_memory_mb=erm.peak_memory_mb)
    progress.close()
    return [measured[n] for n in dict.fromkeys(config.algorithms)]


def _measure_group(config: BenchmarkConfig, names: list[str], progress: Progress) -> dict[str, AlgorithmCost]:
    """One worker per algorithm, single steps interleaved round-robin with a rotating order."""
    ctx = mp.get_context("spawn")
    workers = {}
    refused: dict[str, str] = {}
    try:
        for name in names:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, config, name), daemon=True)
            proc.start()
            child.close()  # so that a worker that dies gives EOFError instead of a hang
            workers[name] = (proc, parent)
        for name, (proc, parent) in workers.items():
            try:
                reply = parent.recv()
            except EOFError:
                proc.join(30)
                raise RuntimeError(f"benchmark worker for {name} exited during setup (exit code {proc.exitcode}); "
                                   "its traceback is printed above") from None
            if isinstance(reply, tuple) and reply[0] == "unsupported":
                refused[name] = reply[1]
        if "ERM" in refused:
            raise ValueError(f"ERM cannot train {config.backbone}: {refused['ERM']}")
        timed = [n for n in names if n not in refused]
        times: dict[str, list[float]] = {n: [] for n in timed}
        for round_ in range(config.warmup + config.steps):
            shift = round_ % len(timed)
            for name in timed[shift:] + timed[:shift]:
                conn = workers[name][1]
                conn.send("step")
                t = conn.recv()
                if round_ >= config.warmup:
                    times[name].append(t)
            progress.update()
        results = {n: AlgorithmCost.refused(n, reason) for n, reason in refused.items()}
        for name in timed:
            conn = workers[name][1]
            conn.send("memory")
            results[name] = AlgorithmCost(name, sum(times[name]) / len(times[name]), conn.recv(), tuple(times[name]))
        return results
    finally:
        for name, (proc, conn) in workers.items():
            if name not in refused:
                try:
                    conn.send("stop")
                except (BrokenPipeError, OSError):
                    pass
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()


def round_ratios(result: AlgorithmCost, erm: AlgorithmCost) -> list[float]:
    """The algorithm's step time over ERM's, round by round, against the ERM of its own group (the rounds
    are interleaved); `erm` is the table's ERM row, used when the result carries none."""
    return [t / e for t, e in zip(result.step_times_s, result.erm_step_times_s or erm.step_times_s)]


def cost_table(results: list[AlgorithmCost], title: str) -> Table:
    """One row per algorithm: absolute step time and peak memory and both relative to ERM, the time ratio
    with the IQR of its per-round ratios (memory is measured once: no spread); each algorithm that refused the
    backbone is a note under the table, with its reason."""
    erm = next(r for r in results if r.algorithm == "ERM")
    rows = []
    for r in results:
        if r.unsupported:
            continue
        erm_time = statistics.fmean(r.erm_step_times_s) if r.erm_step_times_s else erm.step_time_s
        erm_memory = r.erm_peak_memory_mb if r.erm_peak_memory_mb is not None else erm.peak_memory_mb
        rows.append([r.algorithm, Cell(mean=r.step_time_s, decimals=3),
                     Cell(mean=r.step_time_s / erm_time, decimals=2, unit="x"),
                     Spread.of(round_ratios(r, erm)).text(".2f"), Cell(mean=r.peak_memory_mb, decimals=0),
                     Cell(mean=r.peak_memory_mb / erm_memory, decimals=2, unit="x")])
    refused = [Text(f"not measured: {r.algorithm} ({r.unsupported})") for r in results if r.unsupported]
    return Table.make(title, ["algorithm", "step time (s)", "rel. to ERM", "IQR over rounds", "peak memory (MB)",
                              "rel. to ERM"], rows, refused)


def cost_warnings(results: list[AlgorithmCost]) -> list[str]:
    """Why a step-time ratio of the table should not be trusted (see `dgmoe.bench.timing.timing_warnings`)."""
    erm = next(r for r in results if r.algorithm == "ERM")
    others = [r for r in results if r is not erm and not r.unsupported]
    if not others:
        return timing_warnings("ERM", [1.0], erm.step_times_s, erm.step_times_s)
    return [w for r in others
            for w in timing_warnings(f"{r.algorithm} vs ERM", round_ratios(r, erm), r.step_times_s,
                                     r.erm_step_times_s or erm.step_times_s)]
