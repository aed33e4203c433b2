"""GPU-hours and wall-clock of a DomainBed study from measured step times (docs/scaling.md).

The study is enumerated job by job with the same grid as `dgmoe sweep` (`build_jobs`), so each job
gets its real batch size: 32 per training domain for `hparams_seed == 0`, otherwise the random draw
that `dgmoe train` will make (`seed_hash(hparams_seed, trial_seed)`, GMoE/DomainBed registry). One job
costs

    t_job = overhead + steps * t_step(model) * c(alg) * B_step / B_ref
            + n_eval * t_eval(model) * N_images / B_ref

with B_step = batch per domain x training domains, B_ref the images per step at which t_step was
measured (160 = 5 x 32, GMoE Table 16), n_eval DomainBed's checkpoints (every `checkpoint_freq` steps
and the last step) and N_images the whole dataset (every domain's in and out splits are evaluated).
Step time is taken as linear in the batch: on a GPU, small batches are less efficient, so smaller
batches are under-estimated. Wall-clock is the longest-processing-time-first schedule of the jobs on G
GPUs, one job per GPU (a lower bound: no queue waits, no failures).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Mapping, Sequence, cast

from dgmoe.document import Cell, Document, Table, Text
from dgmoe.engine.config import RunConfig
from dgmoe.engine.hparams import run_hparams
from dgmoe.sweep.config import SweepConfig
from dgmoe.sweep.jobs import build_jobs


@dataclass(frozen=True)
class StudyDataset:
    name: str
    n_domains: int
    n_images: int  # all domains (DomainBed's counts)
    steps: int
    checkpoint_freq: int


# GMoE §5 / App. D.2: 5K steps, DomainNet 15K, run as DomainBed's 5001 / 15001 (dgmoe's defaults);
# domain and image counts from DomainBed (reference §2.1)
GMOE_STUDY: tuple[StudyDataset, ...] = (
    StudyDataset("PACS", 4, 9_991, 5_001, 300),
    StudyDataset("VLCS", 4, 10_729, 5_001, 300),
    StudyDataset("OfficeHome", 4, 15_588, 5_001, 300),
    StudyDataset("TerraIncognita", 4, 24_788, 5_001, 300),
    StudyDataset("DomainNet", 6, 586_575, 15_001, 1_000),
)

# Training step time relative to ERM with ResNet-50, GMoE Table 16 (1.01 s for ERM).
GMOE_TABLE16_ALGORITHM_COST: dict[str, float] = {
    "ERM": 1.0, "DANN": 1.02 / 1.01, "IRM": 1.10 / 1.01, "Fish": 2.79 / 1.01,
    "Fishr": 1.10 / 1.01, "SWAD": 1.21 / 1.01,
}


@dataclass(frozen=True)
class StudyEstimate:
    rows: list[dict[str, object]]  # per (dataset, model): jobs, gpu_hours, eval_share, longest_job_h
    total_jobs: int
    total_gpu_hours: float
    longest_job_h: float
    wall_clock_h: dict[int, float]  # GPUs -> hours
    assumptions: dict[str, object] = field(default_factory=dict)


def n_evaluations(steps: int, checkpoint_freq: int) -> int:
    """Checkpoints of a DomainBed run: steps s < `steps` with s % freq == 0, plus the last step."""
    return len(set(range(0, steps, checkpoint_freq)) | {steps - 1})


def makespan(durations: Sequence[float], workers: int) -> float:
    """Longest-processing-time-first list schedule of `durations` on `workers` identical workers."""
    if workers < 1:
        raise ValueError(f"need >= 1 GPU, got {workers}")
    loads = [0.0] * min(workers, max(len(durations), 1))
    heapq.heapify(loads)
    for d in sorted(durations, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + d)
    return max(loads)


def batch_per_domain(dataset: str, model: str, hparams_seed: int, trial_seed: int, algorithm: str = "ERM") -> int:
    """The batch size per domain that `dgmoe train` resolves for this run (some algorithms override it)."""
    return int(run_hparams(algorithm, dataset, model, hparams_seed, trial_seed)["batch_size"])


def estimate_study(step_time_s: Mapping[str, float], *,
                   eval_time_s: Mapping[str, float] | None = None,
                   ref_images: int = 160,
                   datasets: Sequence[StudyDataset] = GMOE_STUDY,
                   algorithms: Sequence[str] = ("ERM",),
                   algorithm_cost: Mapping[str, float] = GMOE_TABLE16_ALGORITHM_COST,
                   n_hparams: int = 1, n_trials: int = 3, single_test_envs: bool = True,
                   job_overhead_s: float = 60.0, eval_fraction: float = 1 / 3,
                   gpus: Sequence[int] = (1, 8, 64)) -> StudyEstimate:
    """Estimate the GPU-hours and wall-clock of a study (see module docstring for the model).

    step_time_s: model name -> seconds per training step of `ref_images` images (fwd + bwd + update).
    eval_time_s: model name -> seconds per inference batch of `ref_images` images; by default
        `eval_fraction` x the training step (GMoE Table 16: 0.30 s / 0.98 s for GMoE-S/16).
    """
    if not step_time_s:
        raise ValueError("step_time_s needs at least one model -> seconds entry")
    for name, t in step_time_s.items():
        if not t > 0:
            raise ValueError(f"step time of {name!r} must be > 0 s, got {t}")
    missing = [a for a in algorithms if a not in algorithm_cost]
    if missing:
        raise ValueError(f"no step-time ratio for algorithm(s) {missing}; known: {sorted(algorithm_cost)}")
    models = tuple(step_time_s)
    eval_t = {m: (eval_time_s or {}).get(m, eval_fraction * step_time_s[m]) for m in models}
    rows: list[dict[str, object]] = []
    durations: list[float] = []
    for ds in datasets:
        cfg = SweepConfig(datasets=(ds.name,), algorithms=tuple(algorithms), models=models, output_dir="estimate",
                          base=RunConfig.from_flat(steps=ds.steps, checkpoint_freq=ds.checkpoint_freq),
                          n_hparams=n_hparams, n_trials=n_trials, single_test_envs=single_test_envs)
        evals = n_evaluations(ds.steps, ds.checkpoint_freq)
        per_model: dict[str, list[float]] = {m: [] for m in models}
        eval_s = {m: 0.0 for m in models}
        for job in build_jobs(cfg, n_domains={ds.name: ds.n_domains}):
            a = job.config.flat()
            model = a["model"]
            images = batch_per_domain(ds.name, model, a["hparams_seed"], a["trial_seed"], a["algorithm"]) * (
                ds.n_domains - len(a["test_envs"]))
            train = ds.steps * step_time_s[model] * algorithm_cost[a["algorithm"]] * images / ref_images
            evaluate = evals * eval_t[model] * ds.n_images / ref_images
            per_model[model].append(job_overhead_s + train + evaluate)
            eval_s[model] += evaluate
        for m in models:
            rows.append({"dataset": ds.name, "model": m, "jobs": len(per_model[m]),
                         "gpu_hours": sum(per_model[m]) / 3600, "eval_share": eval_s[m] / sum(per_model[m]),
                         "longest_job_h": max(per_model[m]) / 3600})
            durations += per_model[m]
    return StudyEstimate(
        rows=rows, total_jobs=len(durations), total_gpu_hours=sum(durations) / 3600,
        longest_job_h=max(durations) / 3600,
        wall_clock_h={g: makespan(durations, g) / 3600 for g in gpus},
        assumptions={"step_time_s": dict(step_time_s), "eval_time_s": eval_t, "ref_images": ref_images,
                     "algorithms": list(algorithms), "n_hparams": n_hparams, "n_trials": n_trials,
                     "test_envs": "singles" if single_test_envs else "singles + pairs",
                     "job_overhead_s": job_overhead_s})


def estimate_document(est: StudyEstimate) -> Document:
    """The assumptions, a per-(dataset, model) table and the wall-clock per GPU count."""
    def number(value: object, decimals: int, scale: float = 1.0, unit: str = "") -> Cell:
        return Cell(mean=scale * cast(float, value), decimals=decimals, unit=unit)

    rows = [[r["dataset"], r["model"], r["jobs"], number(r["gpu_hours"], 1), number(r["eval_share"], 0, 100, "%"),
             number(r["longest_job_h"], 2)] for r in est.rows]
    rows.append(["**total**", "", est.total_jobs, Cell(mean=est.total_gpu_hours, decimals=1), "",
                 Cell(mean=est.longest_job_h, decimals=2)])
    per_job = Table.make("", ["dataset", "model", "jobs", "GPU-hours", "evaluation share", "longest job (h)"], rows,
                         left=2)
    walls = [[g, Cell(mean=h, decimals=1), Cell(mean=max(est.total_gpu_hours / g, est.longest_job_h), decimals=1)]
             for g, h in est.wall_clock_h.items()]
    wall = Table.make("", ["GPUs (one job per GPU)", "wall-clock (h)", "lower bound max(total/G, longest) (h)"],
                      walls, left=0)
    assumptions = "; ".join(f"{k} = {v}" for k, v in est.assumptions.items())
    return Document((Text("Assumptions: " + assumptions), per_job, wall))
