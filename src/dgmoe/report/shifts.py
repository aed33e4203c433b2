"""The distribution-shift table: a suite's in-distribution accuracy, every shift's accuracy and, given a
baseline testbed, every shift's effective robustness (Taori et al., NeurIPS 2020, Sec. 3), from runs that train
on the suite's training domain and hold out all the others (ImageNet -> ImageNet-val, -V2, -R, -Sketch, -A,
ObjectNet: WiSE-FT, Wortsman et al., CVPR 2022, Table 1; FLYP, Goyal et al., CVPR 2023, Table 1). DomainBed-OOP
datasets get, beside DomainBed's tables, the test domain's accuracy on its out-of-pretraining images (`oop_key`).

Cells are accuracies over each whole held-out domain (`env{i}_acc_all`, `dgmoe.engine.evaluate`) at the
checkpoint training-domain validation picks (the best mean `out` accuracy over the training domains, then the
best hparams draw by the same score: DomainBed's `iid`), mean +/- SE over trial seeds in %. "Avg shifts" is the
mean over the shifts, per trial seed. Effective robustness needs a baseline: `--shift-fit FILE`, a CSV of a
testbed of models trained on the ID data alone (a `model` column, then accuracies in % under the suite's
domain names, e.g. `ImageNet-val,ImageNet-V2,...`), to which each shift's line is fitted in logit space
(`dgmoe.metrics.LogitFit`); the table names the file and prints each line's slope and intercept. dgmoe ships
no coefficients: Taori et al. publish their testbed's accuracies, not the lines, and a fit is only as good as
its testbed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from dgmoe.document import Table, Text
from dgmoe.metrics import LogitFit, ShiftSuite, effective_robustness
from dgmoe.report.tables import RowKey, dataset_domains, mean_cell, row_labels
from dgmoe.selection import python_argmax, rank_key

ACC = "acc_all"  # as `dgmoe.engine.evaluate.SHIFT_ACC` (the report does not import the engine)


def suite_of(dataset: str) -> ShiftSuite | None:
    """The catalogue's shift suite of `dataset` (None: none, or a dataset the catalogue does not know)."""
    from dgmoe.data.catalogue import DATASETS  # (the catalogue imports torch)

    return DATASETS.get(dataset).shifts if dataset in DATASETS else None


def oop_key(dataset: str) -> str | None:
    """The record key suffix of a DomainBed-OOP dataset's out-of-pretraining accuracy (`dgmoe.data.shifts.oop`;
    None for other datasets)."""
    from dgmoe.data.shifts import oop  # (the catalogue imports torch)

    return f"acc_{oop.FIELD}:{oop.GROUPS[1]}" if dataset in {s.name for s in oop.SPECS} else None


OOP_TITLE = "{}: accuracy on the test domain's out-of-pretraining images (DomainBed-OOP, Teterwak et al., ICLR 2025)"


def shift_datasets(records: pd.DataFrame) -> list[str]:
    """Datasets whose records carry whole-domain accuracies and that the catalogue declares shift suites."""
    if not any(c.endswith(f"_{ACC}") for c in records.columns):
        return []
    return [d for d in sorted(records["dataset"].unique()) if suite_of(d) is not None]


def _run_pick(run: pd.DataFrame) -> tuple[float, Mapping] | None:
    """(validation score, record) of a run's checkpoint with the best mean training-domain `out` accuracy."""
    held = set(int(t) for t in run["test_envs"].iloc[0])
    keys = [f"env{j}_out_acc" for j in range(int(run["n_envs"].iloc[0])) if j not in held]
    rows = run.sort_values(["file", "line"], kind="stable").to_dict("records")
    scores = [float(np.mean([float(r[k]) for k in keys])) if keys else float("nan") for r in rows]
    best = python_argmax(scores)
    return None if best is None else (scores[best], rows[best])


def shift_values(records: pd.DataFrame, dataset: str) -> dict[RowKey, dict[str, list[float]]]:
    """{(algorithm, model): {domain: one whole-domain accuracy per trial seed}} at the checkpoints that
    training-domain validation picks (see the module docstring)."""
    mine = records[(records["dataset"] == dataset) & (records["test_envs"].map(len) > 1)]
    domains = dataset_domains(records, dataset)
    out: dict[RowKey, dict[str, list[float]]] = {}
    for (alg, model, _), trial in mine.groupby(["algorithm", "model", "trial_seed"], sort=True):
        picks = [p for _, run in trial.groupby("run_dir", sort=True) if (p := _run_pick(run)) is not None]
        if not picks:
            continue
        _, record = max(picks, key=lambda p: rank_key(p[0]))  # the first of equal scores: sorted run folders
        cells = out.setdefault((alg, model), {})
        for i, domain in enumerate(domains):
            value = record.get(f"env{i}_{ACC}")
            if value is not None and not pd.isna(value):
                cells.setdefault(domain, []).append(float(value))
    return out


def read_fits(path: str | Path, suite: ShiftSuite) -> dict[str, LogitFit]:
    """Each shift's `LogitFit` over the testbed CSV `path` (see the module docstring); shifts the file lacks
    get none. A bad file is a one-line error naming it."""
    path = Path(path)
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"--shift-fit {path}: not a readable CSV ({e})") from None
    if suite.id_domain not in table.columns:
        raise ValueError(f"--shift-fit {path}: no column {suite.id_domain!r} (the ID accuracy, in %); its columns: "
                         f"{', '.join(map(str, table.columns))}")
    fits = {}
    for shift in suite.shifts:
        if shift in table.columns:
            rows = table[[suite.id_domain, shift]].dropna().astype(float) / 100.0
            fits[shift] = LogitFit.fit(list(rows[suite.id_domain]), list(rows[shift]),
                                       f"{path.name}, {len(rows)} models")
    return fits


def shift_table(records: pd.DataFrame, dataset: str, names: Mapping[RowKey, str] | None = None,
                fits: Mapping[str, LogitFit] | None = None) -> Table:
    """One suite's table (see the module docstring); effective-robustness columns for the shifts in `fits`."""
    suite = suite_of(dataset)
    if suite is None:
        raise ValueError(f"{dataset} is not a distribution-shift suite")
    values = shift_values(records, dataset)
    fits = fits or {}
    keys = sorted(values)
    labels = row_labels(keys, names)
    header = ["Algorithm", suite.id_domain, *suite.shifts, "Avg shifts", *(f"ER {s}" for s in suite.shifts
                                                                            if s in fits)]
    rows = []
    for key in keys:
        cells = values[key]
        n = min((len(cells.get(d, [])) for d in (suite.id_domain, *suite.shifts)), default=0)
        avg = [float(np.mean([cells[s][k] for s in suite.shifts])) for k in range(n)]
        ers = {s: [effective_robustness(cells[suite.id_domain][k], cells[s][k], f) for k in range(n)]
               for s, f in fits.items()}
        rows.append([labels[key], *(mean_cell(cells.get(d, [])) for d in (suite.id_domain, *suite.shifts)),
                     mean_cell(avg), *(mean_cell(ers[s]) for s in suite.shifts if s in fits)])
    title = (f"{dataset}: accuracy on {suite.id_domain} and each shift, checkpoints chosen by training-domain "
             "validation")
    if fits:
        lines = "; ".join(f"{s}: slope {f.slope:.4f}, intercept {f.intercept:.4f} ({f.source})"
                          for s, f in fits.items())
        note = (f"ER: effective robustness (Taori et al., NeurIPS 2020), the shift's accuracy minus the logit-linear "
                f"baseline at the same {suite.id_domain} accuracy, in points. Baselines: {lines}.")
    else:
        note = "No effective robustness: give a baseline testbed with --shift-fit FILE (see dgmoe.report.shifts)."
    return Table.make(title, header, rows, [Text(note)])
