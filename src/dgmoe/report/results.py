"""The results report: per selection method, DomainBed's tables for the datasets with single-test-domain
runs (`dgmoe.report.tables`) and WILDS tables for those with WILDS metrics (`dgmoe.report.wilds`); see
`dgmoe.report.tables` for what each cell is."""
from __future__ import annotations

from typing import Sequence, cast

import pandas as pd

from dgmoe.document import Block, Document, Heading, Text
from dgmoe.report.tables import averages_table, dataset_table, preamble, user_labels
from dgmoe.report.test_split import DESCRIBE, check_selection, with_test_split
from dgmoe.report.text import count
from dgmoe.selection import (
    IDWorstGroupSelection,
    LeaveOneOutSelection,
    MethodLike,
    OracleSelection,
    WildsOfficialSelection,
    WorstGroupSelection,
    resolve_selections,
    sweep_accs,
)


def results_tables(
    records: pd.DataFrame, selection: MethodLike | Sequence[MethodLike] = "all", latex: bool = False,
    complete_trials: bool = False, hparams: bool = False, bootstrap_seed: int = 0, shift_fit: str | None = None,
    test_split: str = "in",
) -> str:
    """The Markdown (or LaTeX) text of `results_document`."""
    return results_document(records, selection, complete_trials, hparams, bootstrap_seed, shift_fit,
                            test_split).text(latex)


def results_document(
    records: pd.DataFrame, selection: MethodLike | Sequence[MethodLike] = "all", complete_trials: bool = False,
    hparams: bool = False, bootstrap_seed: int = 0, shift_fit: str | None = None, test_split: str = "in",
) -> Document:
    """The results tables: per selection method, one table per dataset and an Averages table.

    `selection` is `"iid"`, `"loo"`, `"oracle"`, `"worst"`, `"all"` (DomainBed's three, then worst-group
    selection for the WILDS datasets), a `SelectionMethod` class, or a list of these. DomainBed's tables
    cover the datasets with single-test-domain runs; under worst-group selection the WILDS datasets get their
    WILDS tables instead. `complete_trials` leaves trial seeds that lack a test domain out of the Averages;
    `hparams` adds, after each dataset's table, the runs its cells selected (`dgmoe.report.selected`);
    `bootstrap_seed` seeds the intervals of the worst-group tables (`dgmoe.report.wilds_groups`).
    Distribution-shift suites (ImageNetShifts) get their shift table (`dgmoe.report.shifts`), with effective
    robustness against the baseline testbed `shift_fit` (a CSV) when given. `test_split`: the held-out domains'
    split DomainBed's tables report (`dgmoe.report.test_split`: `in`, DomainBed's, or `out`, CLIPood's; with `out`,
    `all` leaves test-domain validation out, as it selects on that split).
    """
    from dgmoe.report.protocol import protocol_block
    from dgmoe.report.selected import selected_table
    from dgmoe.report.shifts import OOP_TITLE, oop_key, read_fits, shift_datasets, shift_table, suite_of
    from dgmoe.report.wilds import has_worst_group, wilds_datasets, wilds_runs, wilds_tables, worst_group_table

    if records.empty:
        raise ValueError("no records to report")
    methods = resolve_selections(selection)
    split_note = _test_split_methods(methods, selection, test_split)
    test_records = with_test_split(records, test_split)
    wilds = wilds_datasets(records)
    if selection == "all" and wilds:
        methods.append(WorstGroupSelection)
    single = sorted(set(records.loc[records["test_envs"].map(len) == 1, "dataset"]))
    names = user_labels(records)
    cells = (
        "Cells: test-domain accuracy (%), mean +/- standard error over trial seeds (SE = population std / sqrt(n)). "
        f"DomainBed's tables test on {DESCRIBE[test_split]}." + split_note
    )
    if wilds:
        cells += (" WILDS tables: accuracy, worst-group accuracy and macro-F1 (%) over each held-out split, "
                  "at the checkpoint with the best worst-group accuracy on the validation split.")
    chosen = [m for m in methods if not (m is WorstGroupSelection and not wilds)]
    left = left_out(records, wilds)
    parts: list[Block] = [preamble(records, "dgmoe results", cells),
                          protocol_block(records, "; ".join(m.name for m in chosen)), *map(Text, left)]
    for method in methods:
        worst = issubclass(method, WorstGroupSelection)
        datasets = [d for d in single if not (worst and d in wilds)]
        if (selection == "all" and worst) or method in (IDWorstGroupSelection, WildsOfficialSelection):
            datasets = []  # `all`: worst-group selection only for the WILDS datasets
        wg = cast(type[WorstGroupSelection], method)
        tables: list[Block] = [t for d in wilds if wg.val_env(wilds_runs(records, d)) is not None
                               for t in wilds_tables(records, d, names, wg, bootstrap_seed)] if worst else []
        if datasets:
            sweep = sweep_accs(test_records, method)
            for d in datasets:  # Camelyon17: beside the accuracy, the held-out hospital's worst-slide accuracy
                tables.append(dataset_table(records, sweep, d, names))
                why = loo_note(records, d) if method is LeaveOneOutSelection else None
                if why:
                    tables.append(Text(why))
                if hparams:
                    tables.append(selected_table(records, sweep, d, names))
                if (oop := oop_key(d)) is not None:  # DomainBed-OOP: the test domain's out-of-pretraining images
                    tables.append(worst_group_table(records, sweep, d, names, oop, OOP_TITLE.format(d)))
                elif has_worst_group(records, d):
                    tables.append(worst_group_table(records, sweep, d, names))
            tables.append(averages_table(records, sweep, datasets, complete_trials, names))
        if tables:
            parts.append(Heading(f"Model selection: {method.name}", 2))
            parts.extend(tables)
    suites = shift_datasets(records)
    if shift_fit is not None and not suites:
        raise ValueError(f"--shift-fit {shift_fit}: no run of a distribution-shift suite (ImageNetShifts) to compare")
    if suites:
        parts.append(Heading("Distribution shift", 2))
        for d in suites:
            fits = read_fits(shift_fit, suite_of(d)) if shift_fit is not None else None  # type: ignore[arg-type]
            parts.append(shift_table(records, d, names, fits))
    if len(parts) == 2 + len(left):
        raise ValueError("no run fits a results table: DomainBed's tables need runs that hold out one domain "
                         "(--test-envs t), WILDS tables runs that hold out the validation split"
                         + "".join(f"; {n[len('Left out: '):]}" for n in left))
    return Document(tuple(parts))


def _test_split_methods(methods: list, selection: MethodLike | Sequence[MethodLike], test_split: str) -> str:
    """With the `out` test split: test-domain validation left out of `all` (a sentence saying so), refused when
    asked for by name (`dgmoe.report.test_split.check_selection`)."""
    if test_split == "in" or OracleSelection not in methods:
        return ""
    if selection != "all":
        check_selection(test_split, "oracle")
    methods.remove(OracleSelection)
    return (" Test-domain validation (oracle) is left out: it selects on the held-out domain's out split, which "
            "these tables report.")


def left_out(records: pd.DataFrame, wilds: Sequence[str]) -> list[str]:
    """One line per dataset whose runs are in no table, and why: runs that hold out several domains at once,
    of a dataset without a WILDS table or any single-test-domain run (leave-one-domain-out reads such runs
    only beside single runs of the same cell)."""
    single = set(records.loc[records["test_envs"].map(len) == 1, "dataset"])
    multi = records[(records["test_envs"].map(len) > 1) & ~records["dataset"].isin([*wilds, *single])]
    lines = []
    for dataset, runs in multi.groupby("dataset", sort=True):
        dirs = sorted(runs["run_dir"].unique())
        envs = sorted({tuple(t) for t in runs["test_envs"]})
        lines.append(f"Left out: {count(len(dirs), 'run')} of {dataset} (e.g. {dirs[0]}) "
                     f"{'holds' if len(dirs) == 1 else 'hold'} out several domains at once (--test-envs "
                     f"{' '.join(map(str, envs[0]))}); leave-one-domain-out selection reads such runs beside "
                     "single-domain runs of the same cell, and there are none.")
    return lines


def loo_note(records: pd.DataFrame, dataset: str) -> str | None:
    """Why a dataset's leave-one-domain-out cells are X: no run of it, or not every pair {t, v}, holds out a pair
    of domains (a cell for t needs the pair runs {t, v} of every other domain v); None when all pairs are there."""
    mine = records[records["dataset"] == dataset]
    pairs = {tuple(sorted(t)) for t in mine["test_envs"] if len(t) == 2}
    n = int(mine["n_envs"].iloc[0]) if "n_envs" in mine.columns and len(mine) else 0
    need = n * (n - 1) // 2
    how = "--test-envs t v, which `dgmoe sweep launch` adds unless --single-test-envs"
    if not pairs:
        return f"Leave-one-domain-out on {dataset}: no run holds out a pair of domains ({how}), so every cell is X."
    if len(pairs) < need:
        return (f"Leave-one-domain-out on {dataset}: runs hold out {len(pairs)} of its {need} pairs of domains "
                f"({how}); a cell for test domain t is X unless the pair of t with every other domain is there.")
    return None
