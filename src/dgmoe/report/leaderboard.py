"""WILDS leaderboard export (`dgmoe leaderboard`): per-split prediction files and a summary, for the
checkpoints WILDS' model selection picks. Here: which checkpoints (`selected_checkpoints`), the files' names
and the summary's aggregation and rendering; the predictions are made and written by
`dgmoe.posthoc.leaderboard`.

WILDS' leaderboard takes, per method, one prediction file per evaluation split and seed, named
`{dataset}_split:{split}_seed:{seed}_epoch:best_pred.csv` with WILDS' own dataset and split names (`fmow`,
`iwildcam`, `camelyon17`; Camelyon17's hospital_1 is its `val`, hospital_2 its `test`: `GroupEvaluation.wilds_name`
and `wilds_splits`), one predicted label per line in the order of the split's examples (the metadata's row
order, which is the order of a dgmoe WILDS domain): WILDS' evaluator `examples/evaluate.py` looks for files
starting `{dataset}_split:{split}_seed:{seed}` (Koh et al., WILDS, ICML 2021, App. and the leaderboard's
submission guidelines; `tests/parity/fixtures/wilds_evaluate.json` records its expectations). Files go to
`DIR/<WILDS name>/<method>/`, the folder `evaluate.py <folder> <out> --dataset <WILDS name>` reads. For each
(algorithm, model) and trial seed, the checkpoint is the one the table's selection picks (`worst`: the OOD
validation split, WILDS' default; `worst-id`: id_val), so its weights must have been kept: the best or last
weights when they are that checkpoint, else `model_step<N>.safetensors` (`--save-model-every-checkpoint`).

The summary (`summary.json`, `summary.md` per method folder) gives, per split, the official metrics computed
from the written predictions, per seed and, as WILDS' evaluator aggregates them, as mean and standard deviation
over seeds (ddof=1; null for one seed), beside the values the run's record holds for that checkpoint (they
agree: both are over the whole split), the number of seeds against the number WILDS asks for, the selection,
and the splits WILDS' evaluator reads that were not written (Camelyon17's id_val, which dgmoe's hospital domains
do not hold apart) or that the dataset is a split of dgmoe's own (FMoW-LAO), which the evaluator does not know.
Runs trained on a subsample (`--n-per-domain`) are refused: their splits are not WILDS' splits.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dgmoe.document import Cell, Table
from dgmoe.engine.checkpoint import WEIGHT_FILES, checkpoint_step, read_run_config, saved_run
from dgmoe.errors import UsageError
from dgmoe.report.tables import row_labels, user_labels
from dgmoe.report.wilds import wilds_datasets, wilds_runs
from dgmoe.selection import WorstGroupSelection, sweep_accs
from dgmoe.tables import heading


@dataclass(frozen=True)
class Pick:
    """One selected checkpoint: a run, its step, its weights file, and the method row it belongs to."""

    dataset: str
    label: str
    trial_seed: int
    run_dir: Path
    step: int
    weights: Path
    record: dict[str, Any]


def pred_file_name(dataset: str, split: str, seed: int) -> str:
    return f"{dataset}_split:{split}_seed:{seed}_epoch:best_pred.csv"


def _weights_for(run_dir: Path, step: int) -> Path | None:
    candidates = [run_dir / f"model_step{step}.safetensors", *(run_dir / f for f in WEIGHT_FILES.values())]
    return next((p for p in candidates if p.is_file() and checkpoint_step(p) == step), None)


def selected_checkpoints(records: pd.DataFrame, method: type[WorstGroupSelection] = WorstGroupSelection
                         ) -> list[Pick]:
    """The checkpoint of every (WILDS dataset, row, trial seed); refuses, in one line, before anything is
    written, a pick whose weights were not kept or a run on a subsample."""
    names = user_labels(records)
    picks: dict[tuple, Pick] = {}
    for dataset in wilds_datasets(records):
        mine = wilds_runs(records, dataset)
        sweep = sweep_accs(mine, method)
        labels = row_labels(sorted(set(zip(sweep["algorithm"], sweep["model"]))), names)
        by_step = {(r["run_dir"], int(r["step"])): r["record"] for r in mine.to_dict("records")}
        for row in sweep.to_dict("records"):
            key = (dataset, labels[(row["algorithm"], row["model"])], int(row["trial_seed"]))
            run_dir, step = Path(row["run_dir"]), int(row["step"])
            if key in picks:
                continue
            config = read_run_config(run_dir)
            if saved_run(config).data.n_per_domain is not None:
                raise UsageError(f"{run_dir} was trained on a subsample (--n-per-domain); its splits are not WILDS' "
                                 "and cannot go to the leaderboard")
            weights = _weights_for(run_dir, step)
            if weights is None:
                raise UsageError(f"{run_dir}: the checkpoint {method.name} selects (step {step}) has no weights "
                                 "file; train with --save-model-every-checkpoint to export it")
            picks[key] = Pick(dataset, key[1], key[2], run_dir, step, weights, by_step[(row["run_dir"], step)])
    if not picks:
        raise UsageError(f"no WILDS run ({method.name}) to export: the leaderboard takes FMoW, iWildCam, "
                         "Camelyon17, ... runs that hold out their evaluation splits")
    return [picks[k] for k in sorted(picks)]


def not_written(summary: dict[str, Any]) -> list[str]:
    """What WILDS' evaluator would miss in a method folder: a dataset it does not know, the splits it reads
    that no seed wrote (one line each; empty: the folder is complete for it, seeds aside)."""
    if summary["wilds_name"] is None:
        return [f"{summary['dataset']} is a split of dgmoe's own, not a WILDS benchmark: WILDS' evaluator does "
                "not read it"]
    written = {split for entry in summary["seeds"].values() for split in entry["splits"]}
    missing = [s for s in summary["evaluator_reads"] if s not in written]
    return [f"WILDS' evaluator also reads split {s}, which these runs did not hold out (no file written; "
            f"evaluate.py stops there)" for s in missing]


def aggregate(seeds: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """{split: {metric: {mean, std}}} over seeds, as WILDS' evaluator aggregates replicates: `np.mean` and
    `np.std(..., ddof=1)` (None for one seed, where that is undefined)."""
    values: dict[str, dict[str, list[float]]] = {}
    for entry in seeds.values():
        for split, info in entry["splits"].items():
            for metric, value in info["metrics"].items():
                values.setdefault(split, {}).setdefault(metric, []).append(value)
    return {split: {m: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else None}
                    for m, v in metrics.items()} for split, metrics in values.items()}


def summary_markdown(summary: dict[str, Any]) -> str:
    n, need = len(summary["seeds"]), summary["seeds_required"]
    rows = [[split, metric, Cell(mean=100 * stats["mean"], decimals=2),
             Cell("-") if stats["std"] is None else Cell(mean=100 * stats["std"], decimals=2)]
            for split, metrics in summary["aggregate"].items() for metric, stats in metrics.items()]
    files = sorted(info["file"] for e in summary["seeds"].values() for info in e["splits"].values())
    notes = [f"Not for WILDS' evaluator as it stands: {line}." for line in summary.get("not_written", [])]
    table = Table.make("", ["split", "metric", "mean (%)", "std (%)"], rows, left=2)
    return "\n".join([heading(f"{summary['dataset']}: {summary['method']}", 1), "",
                      f"Selection: {summary['selection']}. Seeds: {n} (WILDS asks for {need}"
                      + ("; fewer here)." if n < need else ")."), "", table.markdown(title=False), "",
                      "std: over seeds with ddof=1, as WILDS' evaluator; - for one seed.",
                      "Prediction files: " + ", ".join(files), *notes, ""])
