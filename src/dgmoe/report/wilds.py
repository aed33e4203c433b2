"""WILDS results tables: the official metrics of every held-out split at the checkpoint that worst-group
validation picks (Koh et al., WILDS, ICML 2021; MoGE Table 1).

For each dataset whose records carry WILDS metrics (`wilds_val_env`, written by `dgmoe.engine.evaluate`),
rows are algorithms (or "algorithm / model", or the runs' `--label`) and columns are, for every held-out
split t other than the validation split, its accuracy over the whole split (`env{t}_acc_avg`, WILDS'
`acc_avg`), its worst-group accuracy (`env{t}_acc_worst_group`: FMoW's `acc_worst_region`, Camelyon17's
`acc_wg` over slides, iWildCam's worst camera) and, where recorded, its macro-F1 (`env{t}_f1_macro`,
iWildCam's `F1-macro_all`). Checkpoint and hparams seed are chosen per (algorithm, model, trial seed) by
`dgmoe.selection.WorstGroupSelection` on the dataset's OOD validation split; cells are mean +/- SE over
trial seeds in %, as the DomainBed tables. MoGE Table 1 reads: FMoW `test` worst-region and overall
accuracy, FMoW-LAO `test_asia` accuracy, iWildCam `test` (F1-ood) and `id_test` (F1-id) macro-F1.

Runs that hold out one domain without the validation split (Camelyon17 under GMoE's and DomainBed's
leave-one-hospital-out protocol, hospital 0 by default) are in DomainBed's tables; `worst_group_table` adds
their held-out domain's worst-group accuracy (over the whole domain, in + out) at the checkpoint each
DomainBed selection method picks, in a table of the same shape (domains as columns, "Avg").
"""
from __future__ import annotations

from typing import Mapping

import pandas as pd

from dgmoe.document import Table, Text
from dgmoe.records import WILDS_METRIC_NAMES
from dgmoe.report.tables import RowKey, avg_cell, dataset_domains, mean_cell, row_keys, row_labels
from dgmoe.selection import (
    GROUPS_FIELD,
    VAL_ENV,
    IDWorstGroupSelection,
    WildsOfficialSelection,
    WorstGroupSelection,
    sweep_accs,
)

GROUPS = GROUPS_FIELD
#: (record key suffix, column title: WILDS' official metric name); "{groups}" is the dataset's group field, e.g.
#: region (FMoW's `acc_worst_region`); iWildCam's macro-F1 is WILDS' `F1-macro_all`
METRICS: tuple[tuple[str, str], ...] = tuple(WILDS_METRIC_NAMES.items())


def required_seeds(dataset: str) -> int:
    """The trial seeds WILDS asks for on `dataset` (its catalogue declaration, `GroupEvaluation.trial_seeds`)."""
    from dgmoe.data.catalogue import get_spec  # (the catalogue imports torch)
    from dgmoe.data.errors import UnknownDatasetError
    from dgmoe.metrics import GroupEvaluation

    try:
        evaluation = get_spec(dataset).evaluation
    except UnknownDatasetError:  # a dataset the catalogue does not know (records from elsewhere)
        evaluation = None
    return (evaluation or GroupEvaluation("group")).trial_seeds


def wilds_datasets(records: pd.DataFrame) -> list[str]:
    """Datasets with records of runs that hold out their WILDS validation split."""
    if VAL_ENV not in records.columns:
        return []
    return sorted(records.loc[records[VAL_ENV].notna(), "dataset"].unique())


def wilds_runs(records: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """The records of `dataset` from runs that hold out its WILDS validation split."""
    return records[(records["dataset"] == dataset) & records[VAL_ENV].notna()]


def _value(record: Mapping, key: str) -> float | None:
    value = record.get(key)
    return None if value is None or pd.isna(value) else float(value)


def wilds_values(records: pd.DataFrame, dataset: str, method: type[WorstGroupSelection] = WorstGroupSelection,
                 ) -> dict[RowKey, dict[tuple[int, str], list[float]]]:
    """{(algorithm, model): {(held-out split t, metric key): one value per trial seed}}: the WILDS metrics
    (fractions, e.g. `acc_worst_group`) at the checkpoints `WorstGroupSelection` picks (see the module
    docstring); metrics a record lacks are left out."""
    mine = wilds_runs(records, dataset)
    val_envs = sorted({int(v) for v in mine[VAL_ENV]})
    if len(val_envs) != 1:
        raise ValueError(f"records of {dataset!r} disagree on the validation domain ({VAL_ENV}: {val_envs})")
    sweep = sweep_accs(mine, method)
    chosen = {(r["run_dir"], int(r["step"])): r for r in mine.sort_values(["file", "line"]).to_dict("records")}
    out: dict[RowKey, dict[tuple[int, str], list[float]]] = {}
    for pick in sweep.to_dict("records"):
        cells = out.setdefault((pick["algorithm"], pick["model"]), {})
        record = chosen[(pick["run_dir"], int(pick["step"]))]
        for key, _ in METRICS:
            value = _value(record, f"env{int(pick['test_env'])}_{key}")
            if value is not None:
                cells.setdefault((int(pick["test_env"]), key), []).append(value)
    return out


def wilds_table(records: pd.DataFrame, dataset: str, names: Mapping[RowKey, str] | None = None,
                method: type[WorstGroupSelection] = WorstGroupSelection) -> Table:
    """One dataset's WILDS table (see the module docstring), with a line on its trial seeds."""
    values = wilds_values(records, dataset, method)
    mine = wilds_runs(records, dataset)
    domains = dataset_domains(records, dataset)
    groups = next((str(g) for g in mine.get(GROUPS, pd.Series(dtype=object)).dropna()), "group")
    envs = sorted({t for cells in values.values() for t, _ in cells})
    columns = [(t, key, f"{domains[t]} {title.format(groups=groups)}") for t in envs for key, title in METRICS
               if f"env{t}_{key}" in mine.columns and mine[f"env{t}_{key}"].notna().any()]
    keys = sorted(values)
    labels = row_labels(keys, names)
    rows = [[labels[k], *(mean_cell(values[k].get((t, key), [])) for t, key, _ in columns)] for k in keys]
    val_env = method.val_env(mine)
    if val_env is None:
        raise ValueError(f"{dataset}: no run holds out the split {method.name} selects on")
    metric = {"acc_worst_group": f"worst-{groups} accuracy", "f1_macro": "macro-F1 (F1-macro_all)",
              "acc_avg": "accuracy (acc_avg)"}[method.val_metric(mine)]
    how = ("ID validation, WILDS' named alternative; the default selects on the OOD val split"
           if issubclass(method, IDWorstGroupSelection) else
           "OOD validation with WILDS' official metric" if issubclass(method, WildsOfficialSelection) else
           "OOD validation, WILDS' default; `--selection worst-id` selects on id_val, `--selection wilds` by WILDS' "
           "official metric")
    title = f"{dataset}: checkpoints chosen by {metric} on {domains[val_env]} ({how})"
    return Table.make(title, ["Algorithm", *(c for _, _, c in columns)], rows, [seeds_note(mine, dataset)])


def wilds_tables(records: pd.DataFrame, dataset: str, names: Mapping[RowKey, str] | None = None,
                 method: type[WorstGroupSelection] = WorstGroupSelection, bootstrap_seed: int = 0) -> list[Table]:
    """The WILDS table of `dataset` and, where the records carry group sizes (FMoW's regions), its worst-group
    table with sizes and bootstrap intervals (`dgmoe.report.wilds_groups`)."""
    from dgmoe.report.wilds_groups import has_group_counts, worst_group_ci_table

    mine = wilds_runs(records, dataset)
    tables = [wilds_table(records, dataset, names, method)]
    field = next((str(g) for g in mine.get(GROUPS, pd.Series(dtype=object)).dropna()), None)
    if field is not None and has_group_counts(mine):
        tables.append(worst_group_ci_table(mine, records, dataset, field, names, method, bootstrap_seed))
    return tables


def seeds_note(mine: pd.DataFrame, dataset: str) -> Text:
    """How many trial seeds each row has, against the number WILDS asks for."""
    need = required_seeds(dataset)
    seeds = mine.groupby(["algorithm", "model"])["trial_seed"].nunique()
    fewest = int(seeds.min()) if len(seeds) else 0
    text = (f"Trial seeds per row: {fewest}{'' if seeds.nunique() <= 1 else f' to {int(seeds.max())}'}; WILDS asks "
            f"for {need} on {dataset}" + (" (fewer here: not yet leaderboard numbers)." if fewest < need else "."))
    return Text(text)


def has_worst_group(records: pd.DataFrame, dataset: str) -> bool:
    """Whether the dataset's single-test-domain runs record their held-out domain's worst-group accuracy."""
    single = records[(records["dataset"] == dataset) & (records["test_envs"].map(len) == 1)]
    by_env = single.groupby(single["test_envs"].map(lambda envs: int(list(envs)[0])))
    return any(f"env{t}_acc_worst_group" in runs.columns and runs[f"env{t}_acc_worst_group"].notna().any()
               for t, runs in by_env)


def worst_group_table(records: pd.DataFrame, sweep: pd.DataFrame, dataset: str,
                      names: Mapping[RowKey, str] | None = None, metric: str = "acc_worst_group",
                      title: str | None = None) -> Table:
    """The held-out domain's worst-group accuracy (`env{t}_acc_worst_group`; another record key suffix with
    `metric`, e.g. one named group's `acc_pretraining:OOP`, under `title`) at the checkpoints that `sweep` (one
    DomainBed selection method's `sweep_accs`) picks: per test domain, mean +/- SE over trial seeds."""
    mine = records[records["dataset"] == dataset]
    domains = dataset_domains(records, dataset)
    groups = next((str(g) for g in mine.get(GROUPS, pd.Series(dtype=object)).dropna()), "group")
    chosen = {(r["run_dir"], int(r["step"])): r for r in mine.to_dict("records")}
    picks = sweep[sweep["dataset"] == dataset].to_dict("records")
    keys = row_keys(mine)
    labels = row_labels(keys, names)
    rows = []
    for key in keys:
        cells = []
        for env in range(len(domains)):
            values = [_value(chosen[(p["run_dir"], int(p["step"]))], f"env{env}_{metric}") for p in picks
                      if (p["algorithm"], p["model"]) == key and int(p["test_env"]) == env]
            cells.append(mean_cell([v for v in values if v is not None]))
        rows.append([labels[key], *cells, avg_cell(cells)])
    return Table.make(title or f"{dataset}: worst-{groups} accuracy of the test domain",
                      ["Algorithm", *domains, "Avg"], rows)
