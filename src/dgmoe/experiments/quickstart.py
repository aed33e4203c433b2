"""The offline main job: a small ViT vs a small GMoE on RotatedMNIST from the bundled MNIST digits.

Both runs leave a domain out, are normal run folders (results.jsonl, config.json, weights, done) and
are reported side by side: in-domain accuracy (the held-out 20% of the training domains) and
out-of-domain accuracy (the left-out domain), each at the checkpoint chosen by training-domain validation,
and the run's time as its records account for it (`run_seconds`: the same for a run finished earlier or resumed).
The intermediate checkpoints evaluate a fixed, seeded sample of `eval_sample` images per split of every domain
(`dgmoe train --eval-sample`: the same images at every checkpoint), the last one every image: DomainBed's full
evaluation of all 30,000 RotatedMNIST images at each of the seven checkpoints took most of a run's time.
Before each run trains, a line says which of the models it is, in what order, and what that model is
(`[1/2] ViT (vit_micro_patch7_28): ...`); the run's own first line then names its data and held-out domain.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Callable, Sequence

from dgmoe.engine.config import RunConfig
from dgmoe.engine.trainer import train
from dgmoe.experiments.config import QuickstartConfig
from dgmoe.models.summary import summarize_model
from dgmoe.records import train_domain_val_acc

QUICKSTART_MODELS = ("vit_micro_patch7_28", "gmoe_micro_patch7_28")
_DEFAULT = QuickstartConfig()  # the command's defaults, declared once in its config


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # where the runs' own lines go


def announcement(index: int, count: int, model: str) -> str:
    """`[i/n] <family> (<model>): <structure>`, e.g. `[2/2] GMoE (gmoe_micro_patch7_28): 6 blocks, width 96,
    MoE in last-two blocks (2, 4 of 6), 6 experts top-2 cosine`."""
    summary = summarize_model(model)
    return f"[{index}/{count}] {summary.family} ({model}): {summary.structure}"


def quickstart(output_dir: str | Path = _DEFAULT.output_dir, dataset: str = _DEFAULT.dataset,
               test_envs: int | Sequence[int] = _DEFAULT.test_envs, steps: int = _DEFAULT.steps,
               checkpoint_freq: int = 50, seed: int = _DEFAULT.seed, eval_sample: int | None = _DEFAULT.eval_sample,
               models: Sequence[str] = QUICKSTART_MODELS,
               num_threads: int | None = None, say: Callable[[str], None] = _stderr) -> list[dict]:
    """Train each model once, announcing each with `say` (default: stderr) before it trains, and return one
    summary row per model. `test_envs`: the held-out domain(s), as `dgmoe train --test-envs`; `eval_sample`: the
    images per split the intermediate checkpoints evaluate (None: every image, DomainBed's)."""
    held_out = (test_envs,) if isinstance(test_envs, int) else tuple(test_envs)
    rows = []
    for index, model in enumerate(models, 1):
        say(announcement(index, len(models), model))
        cfg = RunConfig.from_flat(dataset=dataset, test_envs=held_out, model=model, algorithm="ERM",
                          output_dir=str(Path(output_dir) / model), steps=steps, checkpoint_freq=checkpoint_freq,
                          seed=seed, num_threads=num_threads, progress="lines", eval_sample=eval_sample)
        result = train(cfg)
        rows.append(summarize(result.records, held_out, model, run_seconds(result.records)))
    return rows


def quickstart_seeds(output_dir: str | Path, seeds: Sequence[int], say: Callable[[str], None] = _stderr,
                     **kw) -> list[dict]:
    """`quickstart` once per seed, each into `<output_dir>/seed<S>` (its runs in `seed<S>/<model>`), announcing
    each seed with `say`; the rows of every seed, each with its `seed`, in seed order. `kw`: `quickstart`'s
    other settings."""
    rows = []
    for k, seed in enumerate(seeds, 1):
        folder = Path(output_dir) / f"seed{seed}"
        say(f"seed {seed} ({k} of {len(seeds)}): {folder}")
        rows += [{"seed": seed, **row} for row in quickstart(folder, seed=seed, say=say, **kw)]
    return rows


def spread(rows: Sequence[dict]) -> list[dict]:
    """Per model, in first-seen order: the seeds and each accuracy's mean and sample standard deviation over
    them (`<key> sd`: 0 for one seed), and per seed the out-of-domain lead of each model over the first
    (`ood lead`, in the first model's row 0)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    first = {r["seed"]: r["out-of-domain acc"] for r in rows if r["model"] == models[0]}
    out = []
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        row: dict = {"model": model, "seeds": [r["seed"] for r in mine]}
        for key in ("in-domain acc", "out-of-domain acc"):
            values = [r[key] for r in mine]
            row[key], row[f"{key} sd"] = statistics.fmean(values), _sd(values)
        leads = [r["out-of-domain acc"] - first[r["seed"]] for r in mine if r["seed"] in first]
        row["ood lead"], row["ood lead sd"], row["ood leads"] = statistics.fmean(leads), _sd(leads), leads
        out.append(row)
    return out


def _sd(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def run_seconds(records: Sequence[dict]) -> float:
    """The seconds a run's records account for: its training steps (each record's mean `step_time` times the
    steps since the record before it) and its evaluations (`eval_time`), summed over every segment of a resumed
    run, so a run finished earlier, or killed and resumed, reports the time it took, not the time of the call
    that found it finished. Reading the data and building the model before the first step are not counted."""
    seconds, previous = 0.0, -1
    for record in records:
        seconds += record.get("step_time", 0.0) * (record["step"] - previous) + record.get("eval_time", 0.0)
        previous = record["step"]
    return seconds


def summarize(records: list[dict], test_envs: Sequence[int], model: str, seconds: float) -> dict:
    """The checkpoint training-domain validation selects: its in-domain (training domains' out splits) and
    out-of-domain (held-out domains' in splits, averaged) accuracy."""
    domains = records[0]["args"]["domains"]

    def val(r):
        return train_domain_val_acc(r, test_envs)

    best = max(records, key=val)
    return {"model": model, "selected step": best["step"], "in-domain acc": val(best),
            "out-of-domain acc": sum(best[f"env{i}_in_acc"] for i in test_envs) / len(test_envs),
            "test domain": ", ".join(domains[i] for i in test_envs), "train time (s)": seconds}
