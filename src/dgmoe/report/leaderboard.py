"""WILDS leaderboard export (`dgmoe leaderboard`): per-split prediction files and a summary, for the
checkpoints WILDS' model selection picks.

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

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from dgmoe.devices import AUTO, resolve_device
from dgmoe.document import Cell, Table
from dgmoe.engine.checkpoint import WEIGHT_FILES, checkpoint_step, load_state, read_run_config, saved_run
from dgmoe.engine.io import atomic_folder, remove_stale_folders, write_json_atomic, write_text_atomic
from dgmoe.errors import UsageError
from dgmoe.metrics import GroupEvaluation
from dgmoe.records import WILDS_METRIC_NAMES
from dgmoe.report.tables import row_labels, user_labels
from dgmoe.report.wilds import required_seeds, wilds_datasets, wilds_runs
from dgmoe.selection import WorstGroupSelection, sweep_accs
from dgmoe.tables import heading, one_line

OFFICIAL = WILDS_METRIC_NAMES  # record key suffix -> WILDS' metric name ("{groups}": the group field)


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


def predict_splits(pick: Pick, device: str = AUTO, data_dir: str | None = None,
                   ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """{split: (labels, predictions, group ids)} over every whole held-out split of the pick's run."""
    from safetensors.torch import load_file

    from dgmoe.data.loaders import EvalBatches
    from dgmoe.engine.setup import prepare_run

    device = resolve_device(device)
    run = saved_run(read_run_config(pick.run_dir)).replace(device=device, **({"data_dir": data_dir} if data_dir
                                                                              else {}))
    setup = prepare_run(run)
    algorithm = setup.algorithm.to(device)
    load_state(algorithm.inference_network(), load_file(str(pick.weights)))
    algorithm.eval()
    evaluation = setup.dataset.evaluation
    field = evaluation.field if evaluation is not None else None
    batches = EvalBatches(setup.eval_transform, run.execution.eval_batch_size)
    out = {}
    for env in setup.test_envs:
        ys, preds, groups = [], [], []
        with torch.no_grad():
            size = setup.dataset.sizes()[env]
            for _, batch in batches([(setup.dataset[env], np.arange(size))]):
                batch = batch.to(device)
                preds.append(algorithm.predict(batch.x, batch.meta).argmax(1).cpu())
                ys.append(batch.y.cpu())
                if field is not None and batch.meta is not None:
                    groups.append(batch.meta[field].reshape(-1).cpu())
        out[setup.dataset.domains[env]] = (_cat(ys), _cat(preds), _cat(groups))
    return out


def _cat(parts: list[torch.Tensor]) -> np.ndarray:
    return torch.cat(parts).numpy() if parts else np.zeros(0, dtype=np.int64)


def _metrics(dataset: str, y: np.ndarray, pred: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    from dgmoe.data.catalogue import get_spec

    evaluation = get_spec(dataset).evaluation
    if evaluation is None:
        return {"acc_avg": float((y == pred).mean())}
    raw = evaluation.record("", torch.as_tensor(y), torch.as_tensor(pred), torch.as_tensor(groups))
    return {OFFICIAL[k].format(groups=evaluation.field): float(raw[k]) for k in OFFICIAL if k in raw}


def _folder(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", label).strip("_") or "method"


def export(records: pd.DataFrame, out: Path, method: type[WorstGroupSelection] = WorstGroupSelection,
           device: str = AUTO, data_dir: str | None = None, echo: Callable[[str], None] = lambda s: None
           ) -> list[Path]:
    """Write the prediction files and summaries of every method row under `out`; returns the summary paths.

    Each method's folder is written whole (`dgmoe.engine.io.atomic_folder`), after every prediction is made: a
    kill leaves the folder as it was or complete, and the next export removes what a killed one left."""
    picks = selected_checkpoints(records, method)
    from dgmoe.data.catalogue import get_spec

    folders: dict[Path, tuple[str, str]] = {}
    for pick in picks:
        wilds_name = (get_spec(pick.dataset).evaluation or GroupEvaluation("group")).wilds_name or pick.dataset
        folder = out / wilds_name / _folder(pick.label)
        taken = folders.setdefault(folder, (pick.dataset, pick.label))
        if taken != (pick.dataset, pick.label):
            raise UsageError(f"the rows {taken[1]!r} and {pick.label!r} would share the folder {folder}; give the "
                             "runs --labels that differ in letters or digits")
    summaries: dict[tuple[str, str], dict[str, Any]] = {}
    files: dict[tuple[str, str], dict[str, str]] = {}
    for pick in picks:
        domains = list(pick.record["args"]["domains"])
        evaluation = get_spec(pick.dataset).evaluation or GroupEvaluation("group")
        field, name = evaluation.field, evaluation.wilds_name or pick.dataset
        folder = out / name / _folder(pick.label)
        summary = summaries.setdefault((pick.dataset, pick.label), {
            "dataset": pick.dataset, "wilds_name": evaluation.wilds_name, "method": pick.label,
            "selection": method.name, "seeds_required": required_seeds(pick.dataset), "seeds": {},
            "folder": str(folder), "evaluator_reads": list(evaluation.wilds_eval_splits)})
        seed_entry: dict[str, Any] = {"run": str(pick.run_dir), "step": pick.step, "weights": pick.weights.name,
                                      "splits": {}}
        for domain, (y, pred, groups) in predict_splits(pick, device, data_dir).items():
            split = evaluation.wilds_split(domain)
            file_name = pred_file_name(name, split, pick.trial_seed)
            files.setdefault((pick.dataset, pick.label), {})[file_name] = "".join(f"{int(p)}\n" for p in pred)
            env = domains.index(domain)
            recorded = {OFFICIAL[k].format(groups=field): pick.record.get(f"env{env}_{k}") for k in OFFICIAL
                        if f"env{env}_{k}" in pick.record}
            seed_entry["splits"][split] = {"file": file_name, "n": int(len(pred)),
                                           "metrics": _metrics(pick.dataset, y, pred, groups), "recorded": recorded}
        summary["seeds"][str(pick.trial_seed)] = seed_entry
        echo(f"{pick.dataset} / {one_line(pick.label)} / seed {pick.trial_seed}: {len(seed_entry['splits'])} "
             f"prediction files -> {folder}")
    paths = []
    for key, summary in summaries.items():
        summary["aggregate"] = _aggregate(summary["seeds"])
        summary["not_written"] = not_written(summary)
        for line in summary["not_written"]:
            echo(f"{summary['dataset']} / {summary['method']}: {line}")
        folder = Path(summary["folder"])
        folder.parent.mkdir(parents=True, exist_ok=True)
        for stale in remove_stale_folders(folder.parent):
            echo(f"removed {stale}, left by an export that was stopped while writing")
        with atomic_folder(folder) as tmp:
            for name, text in files.get(key, {}).items():
                write_text_atomic(tmp / name, text)
            write_json_atomic(tmp / "summary.json", summary)
            write_text_atomic(tmp / "summary.md", summary_markdown(summary))
        paths.append(folder / "summary.json")
    return paths


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


def _aggregate(seeds: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
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
