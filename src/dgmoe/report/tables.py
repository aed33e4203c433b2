"""Results tables per dataset and selection method, as DomainBed's `collect_results.py` prints them.

Each cell is the test-domain accuracy (%) selected by a method from `dgmoe.selection`, as mean +/- standard
error over trial seeds (SE = population std / sqrt(n)); "X" marks a cell with no scorable run. The
per-dataset "Avg" column is the plain mean of the per-domain means ("X" if any is missing). The
"Averages" table averages the test domains within each trial seed, then takes mean +/- SE over seeds.
As in DomainBed, a trial seed that lacks some test domain is averaged over the domains it has, and the cell
says so: "(k/n)" after it, k the fewest held-out domains of any of its seeds, and its row's Avg reads
"(partial)"; with `complete_trials=True` (CLI `--complete-trials`) such a seed is left out instead, so that
easy and hard domains are not mixed across seeds, and the cell is "X" when no trial seed is complete.

Against DomainBed's `collect_results.py`, every cell is the same on a DomainBed-style sweep (see
`tests/parity/`). Rows are sorted by name (DomainBed: its algorithm list's order) and a dataset's table
leaves out a row with no single-test-env run on that dataset (DomainBed prints it as a row of "X").

Every row names its algorithm and its backbone (`args.model`), "algorithm / model", e.g.
`ERM / gmoe_tiny_patch16_224` (DomainBed prints the algorithm alone); runs trained with `--label NAME` are
named NAME.
Columns are the domain names from `args.domains` when the records carry them, else `env{i}`.

DomainBed's tables are made for datasets with runs that hold out one domain. Datasets whose records carry
WILDS metrics (FMoW, iWildCam, ...) get WILDS tables (`dgmoe.report.wilds`) under worst-group selection,
which `selection="all"` adds after DomainBed's three methods. A DomainBed-table dataset whose single-domain
runs record the held-out domain's worst-group accuracy (Camelyon17, leave-one-hospital-out) gets a second
table beside its accuracy table: that worst-group accuracy at the checkpoints the same method selects.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from dgmoe.document import MISSING, Cell, Preamble, Table, Text
from dgmoe.report.text import count
from dgmoe.selection import mean_and_se

RowKey = tuple[str, str]  # (algorithm, model)


def mean_cell(accs: Iterable[float]) -> Cell:
    """The cell of accuracies (fractions): mean +/- SE in %, "20.0 +/- 4.7" for [0.1, 0.2, 0.3]; "X" for none."""
    stats = mean_and_se(accs)
    if stats is None:
        return MISSING
    return Cell(mean=stats[0], se=stats[1])


def avg_cell(cells: Sequence[Cell]) -> Cell:
    """The plain mean of the cells' means (no SE), or "X" if any is missing."""
    means = [c.mean for c in cells]
    if not means or any(m is None for m in means):
        return MISSING
    return Cell(mean=sum(means) / len(means))  # type: ignore[arg-type]


def row_labels(keys: Iterable[RowKey], names: Mapping[RowKey, str] | None = None) -> dict[RowKey, str]:
    """The runs' user label (`names`, see `user_labels`), else 'algorithm / model' (the algorithm alone for
    records that name no model): a row always says which backbone it is, even in a one-model folder."""
    names = names or {}
    return {(alg, model): names.get((alg, model)) or (f"{alg} / {model}" if model else alg) for alg, model in keys}


def user_labels(records: pd.DataFrame) -> dict[RowKey, str]:
    """{(algorithm, model): the `args.label` of its runs} (several distinct labels are joined by ', ')."""
    if "label" not in records.columns:
        return {}
    out = {}
    for key, labels in records.groupby(["algorithm", "model"], sort=True)["label"]:
        found = sorted({str(label) for label in labels.dropna() if label})
        if found:
            out[key] = ", ".join(found)
    return out


def dataset_domains(records: pd.DataFrame, dataset: str) -> list[str]:
    """Column names for a dataset's domains: `args.domains` if recorded, else `env0`, `env1`, ..."""
    sub = records[records["dataset"] == dataset]
    counts = sorted(set(int(n) for n in sub["n_envs"]))
    if len(counts) != 1:
        raise ValueError(f"records of dataset {dataset!r} disagree on the number of domains: {counts}")
    names = {d for d in sub["domains"] if d is not None}
    if len(names) > 1:
        raise ValueError(f"records of dataset {dataset!r} disagree on args.domains: {sorted(names)}")
    return list(names.pop()) if names else [f"env{i}" for i in range(counts[0])]


def row_keys(records: pd.DataFrame) -> list[RowKey]:
    """(algorithm, model) of the runs a results table is about: those with exactly one test env."""
    single = records[records["test_envs"].map(len) == 1]
    return sorted(set(zip(single["algorithm"], single["model"])))


def dataset_table(records: pd.DataFrame, sweep: pd.DataFrame, dataset: str,
                  names: Mapping[RowKey, str] | None = None) -> Table:
    domains = dataset_domains(records, dataset)
    keys = row_keys(records[records["dataset"] == dataset])
    labels = row_labels(keys, names)
    rows = []
    for alg, model in keys:
        cells = [mean_cell(cell_accs(sweep, dataset, alg, model, len(domains), test_env=env))
                 for env in range(len(domains))]
        rows.append([labels[(alg, model)], *cells, avg_cell(cells)])
    return Table.make(dataset, ["Algorithm", *domains, "Avg"], rows)


def trial_averages(mine: pd.DataFrame, n_envs: int, complete_trials: bool = False) -> list[float]:
    """Per trial seed, the mean selected accuracy over the test domains it has (DomainBed's rule);
    with `complete_trials`, a seed that lacks some test domain is left out."""
    out = []
    for _, trial in mine.groupby("trial_seed", sort=True):
        if not complete_trials or sorted(trial["test_env"]) == list(range(n_envs)):
            out.append(float(np.mean(trial["test_acc"].to_numpy(dtype=float))))
    return out


def partial_domains(sweep: pd.DataFrame, dataset: str, algorithm: str, model: str, n_envs: int) -> int | None:
    """The fewest held-out domains any trial seed of an Averages cell has, when some seed lacks one (its
    average then covers only those: DomainBed's rule); None when every seed has all `n_envs`."""
    mine = sweep[(sweep["dataset"] == dataset) & (sweep["algorithm"] == algorithm) & (sweep["model"] == model)]
    if mine.empty:
        return None
    fewest = int(mine.groupby("trial_seed")["test_env"].nunique().min())
    return fewest if fewest < n_envs else None


PARTIAL_NOTE = ("(k/n): a trial seed of this cell holds out only k of the dataset's n domains, and its average "
                "covers those alone (DomainBed's rule); a row's Avg over such a cell reads (partial). "
                "`dgmoe results --complete-trials` leaves such seeds out.")


def cell_accs(sweep: pd.DataFrame, dataset: str, algorithm: str, model: str, n_envs: int,
              test_env: int | None = None, complete_trials: bool = False) -> list[float]:
    """The accuracies one table cell takes the mean +/- SE of (`mean_cell`, `mean_and_se`): a test domain's
    selected accuracy per trial seed, or (`test_env=None`) each trial seed's average over its test domains,
    the Averages table's cell (`trial_averages`)."""
    mine = sweep[(sweep["dataset"] == dataset) & (sweep["algorithm"] == algorithm) & (sweep["model"] == model)]
    if test_env is not None:
        return [float(a) for a in mine.loc[mine["test_env"] == test_env, "test_acc"]]
    return trial_averages(mine, n_envs, complete_trials)


def averages_table(records: pd.DataFrame, sweep: pd.DataFrame, datasets: Sequence[str],
                   complete_trials: bool = False, names: Mapping[RowKey, str] | None = None) -> Table:
    keys = row_keys(records[records["dataset"].isin(datasets)])
    labels = row_labels(keys, names)
    n_envs = {d: len(dataset_domains(records, d)) for d in datasets}
    rows, any_partial = [], False
    for alg, model in keys:
        cells, partial = [], False
        for dataset in datasets:
            c = mean_cell(cell_accs(sweep, dataset, alg, model, n_envs[dataset], complete_trials=complete_trials))
            fewest = None if complete_trials else partial_domains(sweep, dataset, alg, model, n_envs[dataset])
            if fewest is not None and c.mean is not None:
                c, partial = replace(c, suffix=f" ({fewest}/{n_envs[dataset]})"), True
            cells.append(c)
        avg = avg_cell(cells)
        rows.append([labels[(alg, model)], *cells, replace(avg, suffix=" (partial)") if partial and avg != MISSING
                     else avg])
        any_partial |= partial
    return Table.make("Averages", ["Algorithm", *datasets, "Avg"], rows,
                      [Text(PARTIAL_NOTE, comment=False)] if any_partial else [])


def _args(records: pd.DataFrame) -> list[dict]:
    return [(r.get("args") or {}) if isinstance(r, dict) else {} for r in records["record"]] \
        if "record" in records.columns else [{} for _ in range(len(records))]


def run_counts(records: pd.DataFrame) -> str:
    """"N records from R runs", the soups counted apart from the trained runs ("... from R trained runs and
    S soups"): a soup's records (`args.soup`) come from no training of its own."""
    soups = {d for d, a in zip(records["run_dir"], _args(records)) if a.get("soup")}
    n_runs = records["run_dir"].nunique()
    if not soups:
        return f"{count(len(records), 'record')} from {count(n_runs, 'run')}."
    return f"{count(len(records), 'record')} from {count(n_runs - len(soups), 'trained run')} and " \
        f"{count(len(soups), 'soup')}."


def data_line(records: pd.DataFrame) -> str | None:
    """"Data: <dataset> <version>" of the folders the runs read (`dgmoe.data.versions`), and, where runs
    trained on a subsample of it (`--n-per-domain`), what they used; None when no record names a version."""
    if "data_version" not in records.columns or not records["data_version"].notna().any():
        return None
    used: dict[str, set] = {}
    for dataset, a in zip(records["dataset"], _args(records)):
        used.setdefault(dataset, set()).add(a.get("n_per_domain"))
    known = records.dropna(subset=["data_version"]).groupby("dataset")["data_version"].unique()
    parts = []
    for d, v in known.items():
        sub = sorted(n for n in used.get(d, set()) if n is not None)
        text = f"{d} {', '.join(sorted(v))}"
        if sub:
            full = " (others all of it)" if None in used.get(d, set()) else ""
            text += f", of which the runs used --n-per-domain {', '.join(map(str, sub))} images per domain{full}"
        parts.append(text)
    return "Data: " + "; ".join(parts) + "."


def preamble(records: pd.DataFrame, title: str, cells: str) -> Preamble:
    lines = [
        run_counts(records),
        cells,
        "X: missing (no run can be scored).",
        'Rows read "algorithm / model" (or the runs\' --label).',
    ]
    data = data_line(records)
    if data:
        lines.append(data)
    return Preamble(title, tuple(lines))
