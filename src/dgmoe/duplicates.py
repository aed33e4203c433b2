"""The duplicate rule: when two run dirs hold one run configuration, which the tables must not mix.

A run configuration is its dataset, algorithm, model, held-out domains, hparams seed and trial seed, and the
hparams it was given explicitly (`--hparams`): two runs of one hparams seed given other `--hparams` are two runs
(two draws for model selection), never one run twice. Sits below `dgmoe.selection`, which refuses duplicates,
and `dgmoe.report.collect`, which keeps the first dir of each.
"""
from __future__ import annotations

import pandas as pd

#: records' column of the hparams a run was given explicitly (`--hparams`, as canonical JSON; "" for none)
EXPLICIT_HPARAMS = "explicit_hparams"


#: what makes two run dirs the same run configuration in a table
RUN_KEYS = ["dataset", "algorithm", "model", "test_envs", "hparams_seed", "trial_seed"]


def _run_keys(records: pd.DataFrame) -> list[str]:
    return RUN_KEYS + ([EXPLICIT_HPARAMS] if EXPLICIT_HPARAMS in records.columns else [])


def duplicate_runs(records: pd.DataFrame) -> dict[tuple, list[str]]:
    """{run configuration: its run dirs, sorted} for every configuration found in several run dirs (with its
    explicit hparams, when the records name them)."""
    if records.empty:
        return {}
    dirs = records.groupby(_run_keys(records), sort=True)["run_dir"].unique()
    return {key: sorted(found) for key, found in dirs.items() if len(found) > 1}


def check_unique_runs(records: pd.DataFrame) -> None:
    """Refuse two run dirs with the same configuration: their checkpoints would be mixed into one run."""
    dup = duplicate_runs(records)
    if dup:
        key, found = next(iter(dup.items()))
        raise ValueError(
            f"{len(dup)} run configuration(s) appear in several run dirs, e.g. {dict(zip(_run_keys(records), key))} in "
            f"{found}; remove the extra runs or report them from separate roots"
        )


def _names(dirs: list[str], limit: int = 8) -> str:
    return ", ".join(dirs[:limit]) + (f" and {len(dirs) - limit} more" if len(dirs) > limit else "")


def drop_duplicate_runs(records: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Keep one run dir (the first, sorted) of every configuration found in several, so that tables mix no two
    runs' checkpoints; the message (None: no duplicate) names an example and the run dirs left out."""
    dup = duplicate_runs(records)
    if not dup:
        return records, None
    extra = {d for found in dup.values() for d in found[1:]}
    key, found = next(iter(dup.items()))
    n = len(dup)
    dataset, algorithm, model, test_envs, hparams_seed, trial_seed, *explicit = key
    what = (f"{dataset} / {algorithm} / {model} / test envs {', '.join(map(str, test_envs))} / hparams seed "
            f"{hparams_seed} / trial seed {trial_seed}" + (f" / --hparams {explicit[0]}" if explicit and explicit[0]
                                                           else ""))
    message = (f"{n} run configuration{'' if n == 1 else 's'} appear{'s' if n == 1 else ''} in several run dirs "
               f"(e.g. {what} in {', '.join(found)}); the tables use the first dir of each and leave out "
               f"{len(extra)} duplicate run dir{'' if len(extra) == 1 else 's'}: {_names(sorted(extra))}")
    return records[~records["run_dir"].isin(extra)].reset_index(drop=True), message
