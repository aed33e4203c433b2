"""WILDS leaderboard export (`dgmoe leaderboard`): the predictions of the checkpoints WILDS' model selection picks
(`dgmoe.report.leaderboard.selected_checkpoints`) on every whole held-out split, written per method as
WILDS' prediction files with a summary (`dgmoe.report.leaderboard` names the files and renders the summary;
its docstring gives the format and WILDS' references). Each run's network is rebuilt by
`dgmoe.posthoc.evaluator.rebuild`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from dgmoe.devices import AUTO, resolve_device
from dgmoe.engine.checkpoint import read_run_config, saved_run
from dgmoe.engine.io import atomic_folder, remove_stale_folders, write_json_atomic, write_text_atomic
from dgmoe.errors import UsageError
from dgmoe.metrics import GroupEvaluation
from dgmoe.posthoc.evaluator import holding, rebuild
from dgmoe.records import WILDS_METRIC_NAMES
from dgmoe.report.leaderboard import (
    Pick,
    aggregate,
    not_written,
    pred_file_name,
    selected_checkpoints,
    summary_markdown,
)
from dgmoe.report.wilds import required_seeds
from dgmoe.selection import WorstGroupSelection
from dgmoe.tables import one_line

OFFICIAL = WILDS_METRIC_NAMES  # record key suffix -> WILDS' metric name ("{groups}": the group field)


def predict_splits(pick: Pick, device: str = AUTO, data_dir: str | None = None,
                   ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """{split: (labels, predictions, group ids)} over every whole held-out split of the pick's run."""
    from safetensors.torch import load_file

    from dgmoe.data.loaders import EvalBatches

    device = resolve_device(device)  # auto: the device used
    run = saved_run(read_run_config(pick.run_dir))
    setup = rebuild(run, device, data_dir)
    algorithm = holding(setup, load_file(str(pick.weights)))
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
        summary["aggregate"] = aggregate(summary["seeds"])
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
