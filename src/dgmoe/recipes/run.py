"""Launching a recipe: its sweeps through `dgmoe.sweep`'s launchers (any of them, Slurm included), or, for the
cost and synthetic tables, its measurement in this process.

Nothing is written before every input is found: `prepare` checks the grid (`check_sweep`: algorithms,
models, hparams overrides), the data folders and the weight files, and raises a `UsageError` listing what is
missing (one line each). A launch records what it launched in `<output-dir>/recipe.json`, which
`dgmoe results --recipe` reads; the runs of a part live in `<output-dir>/<part>`, a plain sweep folder. At
the smoke scale it first writes the dense checkpoints its runs load (`SmokeCheckpoint`) and the stand-in folders
they read (`SmokeData`). Its soup parts (WiSE-FT) are made after the sweeps, once the runs they average are done
(`dgmoe.recipes.soups`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from dgmoe.bench.config import BenchmarkConfig
from dgmoe.devices import AUTO, resolve_device
from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import write_json_atomic
from dgmoe.errors import UsageError
from dgmoe.recipes.base import SWEEP_KINDS, Recipe
from dgmoe.recipes.plan import (
    SMOKE,
    SmokeCheckpoint,
    SmokeData,
    available_rows,
    check_scale,
    missing_inputs,
    part_sweeps,
    parts_for,
    resolve_weights,
    row_model,
    smoke_checkpoints,
    smoke_data,
)
from dgmoe.recipes.soups import make_wise_ft
from dgmoe.sweep.config import LaunchConfig
from dgmoe.sweep.jobs import Job, build_jobs, check_sweep
from dgmoe.sweep.launchers import LaunchReport, launch_sweep

MANIFEST = "recipe.json"
COST_FILE = "cost.json"
SYNTHETIC_FILE = "synthetic.json"
Echo = Callable[[str], None]


class MissingInputsError(UsageError):
    """A launch that lacks data folders or weight files; `lines` names each, one per line."""

    def __init__(self, recipe: str, lines: Sequence[str]):
        self.lines = list(lines)
        super().__init__(f"recipe {recipe}: {len(self.lines)} input(s) missing (listed above); nothing was launched")


@dataclass(frozen=True)
class Plan:
    """What a launch will run: the recipe, the scale, the rows, per part its jobs, and the dense checkpoints
    the launch writes for them (smoke scale)."""

    recipe: Recipe
    scale: str
    output_dir: str
    rows: tuple[str, ...]
    jobs: Mapping[str, list[Job]]
    checkpoints: tuple[SmokeCheckpoint, ...] = ()
    data: tuple[SmokeData, ...] = ()
    soups: tuple[str, ...] = ()  # the soup parts made after the sweeps (`Part.wise_ft`)


def prepare(recipe: Recipe, scale: str, output_dir: str | Path, data_dir: str | None = None,
            pretrained: Iterable[str] = (), rows: Iterable[str] = (), execution: Mapping | None = None,
            n_hparams: int | None = None, n_trials: int | None = None) -> Plan:
    """Check every input of a launch and build its jobs, writing nothing (see the module docstring).
    `execution`: flat execution settings for every job (device, workers, ...)."""
    check_scale(scale)
    chosen = available_rows(recipe, rows)
    if recipe.kind not in SWEEP_KINDS:
        if list(pretrained) or data_dir:
            raise UsageError(f"recipe {recipe.name} ({recipe.kind}) trains from random weights on generated data: "
                             "it takes no --pretrained or --data-dir")
        return Plan(recipe, scale, str(output_dir), tuple(r.label for r in chosen), {})
    todo = parts_for(recipe, chosen)
    base = RunConfig.from_flat({**(execution or {}), "data_dir": data_dir})
    weights: dict[str, str] = {}
    if scale == "paper":
        weights = resolve_weights(recipe, [k for p, _, _ in todo for k in p.weight_keys()], pretrained)
        missing = missing_inputs(recipe, [p for p, _, _ in todo], data_dir, weights)
        if missing:
            raise MissingInputsError(recipe.name, missing)
    elif list(pretrained):
        raise UsageError("--pretrained is for the paper scale; the smoke scale writes the dense checkpoints it loads")
    jobs: dict[str, list[Job]] = {}
    checkpoints: dict[SmokeCheckpoint, None] = {}
    data: dict[SmokeData, None] = {}
    for part, algorithms, models in todo:
        if scale == "smoke":
            checkpoints.update((c, None) for c in smoke_checkpoints(recipe, part, models, output_dir) if c)
            data.update((d, None) for d in smoke_data(part, output_dir))
        for sweep in part_sweeps(recipe, part, algorithms, models, scale, output_dir, base, weights, n_hparams,
                                 n_trials):
            try:
                check_sweep(sweep)
            except ValueError as err:
                raise UsageError(f"recipe {recipe.name}, part {part.name}: {err}") from None
            jobs.setdefault(part.name, []).extend(build_jobs(sweep))
    if scale == "smoke":
        jobs = _train_once(jobs)
    soups = tuple(p.name for p, _, _ in todo if p.wise_ft is not None)
    return Plan(recipe, scale, str(output_dir), tuple(r.label for r in chosen), jobs, tuple(checkpoints),
                tuple(data), soups)


def _train_once(jobs: dict[str, list[Job]]) -> dict[str, list[Job]]:
    """At the smoke scale several parts can map onto one stand-in configuration (ResNet and ViT rows both
    become the micro ViT): each job id is trained once, in the first part that has it, and the other parts'
    rows read it there (`dgmoe.recipes.compare`)."""
    seen: set[str] = set()
    out: dict[str, list[Job]] = {}
    for part, part_jobs in jobs.items():
        kept = [j for j in part_jobs if j.job_id not in seen]
        seen |= {j.job_id for j in kept}
        if kept:
            out[part] = kept
    return out


def write_manifest(plan: Plan) -> Path:
    path = Path(plan.output_dir) / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    old = read_manifest(plan.output_dir) if path.is_file() else {}
    if old and (old.get("recipe"), old.get("scale")) != (plan.recipe.name, plan.scale):
        raise UsageError(f"{plan.output_dir} holds recipe {old.get('recipe')} at the {old.get('scale')} scale; "
                         "launch into another --output-dir")
    rows = list(dict.fromkeys([*old.get("rows", []), *plan.rows]))
    write_json_atomic(path, {"recipe": plan.recipe.name, "scale": plan.scale, "rows": rows,
                             "parts": sorted({*old.get("parts", []), *plan.jobs, *plan.soups})})
    return path


def read_manifest(output_dir: str | Path) -> dict:
    """`<output_dir>/recipe.json` ({} when there is none: a sweep laid out by hand, read at the paper scale)."""
    path = Path(output_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return data
    except (ValueError, OSError) as err:
        raise UsageError(f"{path} is not a dgmoe recipe manifest ({err})") from None


def launch(plan: Plan, launcher: str, opts: LaunchConfig = LaunchConfig(), echo: Echo = print,
           relaunch_queued: bool = False, seed: int = 0, device: str = AUTO) -> list[LaunchReport]:
    """Launch a prepared plan: each part's jobs with `launch_sweep`, or the in-process measurement."""
    recipe = plan.recipe
    if recipe.kind not in SWEEP_KINDS:
        if launcher not in ("local", "dummy"):
            raise UsageError(f"recipe {recipe.name} runs in this process ({recipe.kind}), not through a launcher; "
                             "use --launcher local")
        if launcher == "dummy":
            echo(f"would run {recipe.name} ({recipe.kind}) in this process into {plan.output_dir}")
            return []
        write_manifest(plan)
        (run_cost if recipe.kind == "cost" else run_synthetic)(plan, echo, device)
        return []
    if launcher != "dummy":
        write_manifest(plan)
        for checkpoint in plan.checkpoints:
            if checkpoint.write():
                echo(f"wrote {checkpoint.path}: a {checkpoint.model} checkpoint for --pretrained")
        for folder in plan.data:
            if folder.write():
                echo(f"wrote {folder.path}: {folder.dataset}'s stand-in folders for --data-dir")
    for part, jobs in plan.jobs.items():
        echo(f"{part}: {len(jobs)} job(s) into {Path(plan.output_dir) / part}")
    if not opts.submitit_folder:
        opts = replace(opts, submitit_folder=str(Path(plan.output_dir) / ".submitit" / "%j"))
    jobs = [j for part_jobs in plan.jobs.values() for j in part_jobs]
    reports = [launch_sweep(jobs, launcher, opts, echo=echo, relaunch_queued=relaunch_queued, seed=seed)]
    for name in plan.soups:
        soup_part = recipe.part(name)
        assert soup_part.wise_ft is not None
        if launcher == "dummy":
            echo(f"{name}: would make WiSE-FT soups of {soup_part.wise_ft.fine_tuned} against "
                 f"{soup_part.wise_ft.zero_shot} into {Path(plan.output_dir) / name}")
        else:
            make_wise_ft(soup_part, plan.output_dir, echo, device)
    return reports


def benchmark_config(recipe: Recipe, backbone: str, algorithms: tuple[str, ...], smoke: bool,
                     device: str) -> BenchmarkConfig:
    """The `dgmoe algorithms bench` measurement of a cost recipe's rows on one backbone (at the smoke scale:
    the backbone's narrow stand-in, 2 x 2 images of 28 px, 5 timed steps)."""
    assert recipe.cost is not None
    c = recipe.cost
    if smoke:
        return BenchmarkConfig(backbone, algorithms, steps=5, warmup=1, domains=2, batch_per_domain=2, img_size=28,
                               patch_size=SMOKE.patch_size, device=device,
                               model_overrides=tuple(SMOKE.model_kwargs.items()))
    return BenchmarkConfig(backbone, algorithms, steps=c.steps, warmup=c.warmup, domains=c.domains,
                           batch_per_domain=c.batch_per_domain, img_size=c.img_size, patch_size=None, device=device)


def run_cost(plan: Plan, echo: Echo, device: str = AUTO) -> Path:
    """Time every chosen row of a cost table (one `benchmark_algorithms` per backbone) into cost.json, which
    names the device used (`--device auto` resolved)."""
    from dgmoe.bench.algorithms import benchmark_algorithms

    device = resolve_device(device)
    recipe = plan.recipe
    assert recipe.cost is not None
    rows = [recipe.row(label) for label in plan.rows]
    if recipe.cost.reference not in plan.rows:
        rows.insert(0, recipe.row(recipe.cost.reference))
    out: dict[str, dict[str, float | str]] = {}
    for model in dict.fromkeys(row_model(r, plan.scale) for r in rows):
        mine = [r for r in rows if row_model(r, plan.scale) == model]
        algorithms = tuple(dict.fromkeys(["ERM", *(r.algorithm for r in mine)]))
        echo(f"timing {', '.join(algorithms)} on {model} ({plan.scale} scale, {device})")
        config = benchmark_config(recipe, model, algorithms, plan.scale == "smoke", device)
        costs = {c.algorithm: c for c in benchmark_algorithms(config)}
        for r in mine:
            c = costs[r.algorithm]
            if c.unsupported:
                raise ValueError(f"recipe {recipe.name}: row {r.label} cannot be timed on {model}: {c.unsupported}")
            out[r.label] = {"algorithm": r.algorithm, "model": model, "step_time_s": c.step_time_s,
                            "memory_gb": c.peak_memory_mb / 1024}
    path = Path(plan.output_dir) / COST_FILE
    write_json_atomic(path, {"device": device, "scale": plan.scale, "rows": out})
    echo(f"wrote {path}")
    return path


def run_synthetic(plan: Plan, echo: Echo, device: str = AUTO) -> Path:
    """GMoE App. B.2 (`dgmoe synthetic`) into the output dir; the smoke scale trains on 2,000 samples, 1 epoch."""
    from dgmoe.experiments.synthetic import DEFAULT_GRID, run_and_report

    recipe = plan.recipe
    assert recipe.synthetic is not None
    grid: tuple[float, ...] = DEFAULT_GRID
    cfg, seeds = recipe.synthetic, recipe.synthetic_seeds
    if plan.scale == "smoke":
        cfg, seeds, grid = replace(cfg, n_train=2000, n_val=200, n_test=200, epochs=1), (0,), ()
    echo(run_and_report(plan.output_dir, cfg, seeds, grid))
    return Path(plan.output_dir) / SYNTHETIC_FILE


def describe_jobs(plan: Plan) -> str:
    """One line per part: how many jobs, over which datasets, algorithms and backbones."""
    lines = []
    for part, jobs in plan.jobs.items():
        configs = [j.config for j in jobs]
        what = lambda f: ",".join(dict.fromkeys(f(c) for c in configs))  # noqa: E731
        lines.append(f"{part}: {len(jobs)} job(s); {what(lambda c: c.data.dataset)} x "
                     f"{what(lambda c: c.algorithm.name)} x {what(lambda c: c.model.name)}")
    return "\n".join(lines)


__all__ = ["MANIFEST", "COST_FILE", "SYNTHETIC_FILE", "Plan", "prepare", "launch", "read_manifest",
           "MissingInputsError", "describe_jobs"]
