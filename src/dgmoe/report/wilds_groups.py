"""Worst-group figures a reader can weigh: the worst group's accuracy with every group's size and a seeded
bootstrap confidence interval.

A worst-region accuracy can rest on a handful of images: a FMoW region with 4 test images moves the figure by
25 points per image (datacomp #61). For every held-out split of a WILDS dataset whose records carry per-group
accuracies and counts (`env{t}_acc_<field>:<name>`, `env{t}_count_<field>:<name>`: FMoW's regions), at the
checkpoint the table's selection picks, this table gives per trial seed the worst group, its size, the
accuracy, a 95% bootstrap interval and the sizes of all groups.

The bootstrap resamples the split's images with replacement within each group (group sizes fixed, as the
split's are): a group of n images of which k are right then has k* ~ Binomial(n, k/n) right, so the interval
is computed from the recorded (accuracy, count) pairs alone, exactly as resampling the images would be
(Efron & Tibshirani, An Introduction to the Bootstrap, 1993, Ch. 13, percentile interval). Groups the dataset
leaves out of the worst group (FMoW's 'Other') are left out here too. Same seed, same interval.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from dgmoe.data.catalogue import get_spec
from dgmoe.document import Table
from dgmoe.report.tables import RowKey, dataset_domains, row_labels
from dgmoe.selection import WorstGroupSelection, sweep_accs

BOOTSTRAP_DRAWS = 2000
LEVEL = 0.95


def group_stats(record: Mapping, env: int, field: str) -> dict[str, tuple[float, int]]:
    """{group name: (accuracy, count)} of a held-out split's non-empty named groups, from its record."""
    prefix = f"env{env}_count_{field}:"
    out = {}
    for key, count in record.items():
        if key.startswith(prefix) and count is not None and not pd.isna(count) and int(count) > 0:
            name = key[len(prefix):]
            out[name] = (float(record[f"env{env}_acc_{field}:{name}"]), int(count))
    return out


def bootstrap_worst(stats: Mapping[str, tuple[float, int]], seed: int = 0, draws: int = BOOTSTRAP_DRAWS,
                    level: float = LEVEL) -> tuple[float, float]:
    """The percentile bootstrap interval of the worst group's accuracy (see the module docstring)."""
    counts = np.array([n for _, n in stats.values()])
    right = np.rint(np.array([acc for acc, _ in stats.values()]) * counts)
    rng = np.random.default_rng(seed)
    worst = (rng.binomial(counts, right / counts, size=(draws, len(counts))) / counts).min(axis=1)
    return float(np.quantile(worst, (1 - level) / 2)), float(np.quantile(worst, (1 + level) / 2))


def has_group_counts(mine: pd.DataFrame) -> bool:
    """Whether the runs record per-group counts (FMoW's regions; not iWildCam's or Camelyon17's many groups)."""
    return any("_count_" in str(c) and mine[c].notna().any() for c in mine.columns)


def worst_group_ci_table(mine: pd.DataFrame, records: pd.DataFrame, dataset: str, field: str,
                         names: Mapping[RowKey, str] | None = None,
                         method: type[WorstGroupSelection] = WorstGroupSelection, seed: int = 0) -> Table:
    """The table of the module docstring for the runs `mine` of one WILDS dataset."""
    spec = get_spec(dataset)
    exclude = spec.evaluation.exclude_substring if spec.evaluation is not None else None
    domains = dataset_domains(records, dataset)
    sweep = sweep_accs(mine, method).sort_values(["algorithm", "model", "trial_seed", "test_env"])
    chosen = {(r["run_dir"], int(r["step"])): r["record"] for r in mine.to_dict("records")}
    labels = row_labels(sorted(set(zip(sweep["algorithm"], sweep["model"]))), names)
    rows = []
    for pick in sweep.to_dict("records"):
        env = int(pick["test_env"])
        stats = {k: v for k, v in group_stats(chosen[(pick["run_dir"], int(pick["step"]))], env, field).items()
                 if not (exclude and exclude in k)}
        if not stats:
            continue
        worst = min(stats, key=lambda k: (stats[k][0], k))
        low, high = bootstrap_worst(stats, seed)
        sizes = ", ".join(f"{k} {n}" for k, (_, n) in sorted(stats.items()))
        rows.append([labels[(pick["algorithm"], pick["model"])], int(pick["trial_seed"]), domains[env],
                     100 * stats[worst][0], f"{worst} ({stats[worst][1]})",
                     f"[{100 * low:.1f}, {100 * high:.1f}]", sizes])
    title = (f"{dataset}: acc_worst_{field} with {field} sizes and a {int(100 * LEVEL)}% bootstrap interval "
             f"({BOOTSTRAP_DRAWS} draws, seed {seed})")
    return Table.make(title, ["Algorithm", "Trial", "Split", f"acc_worst_{field}", f"worst {field} (n)",
                              f"{int(100 * LEVEL)}% CI", f"{field} sizes (n)"], rows)
