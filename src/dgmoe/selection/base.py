"""What every selection method shares: the record keys a group is made of, a run's chosen checkpoint (`RunAcc`),
DomainBed's argmax and sort key (`python_argmax`, `rank_key`) and the method's interface (`SelectionMethod`,
DomainBed's `model_selection.SelectionMethod`); the package docstring (`dgmoe.selection`) gives the rules."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from dgmoe.duplicates import EXPLICIT_HPARAMS

#: one selected accuracy per group: these keys plus the chosen hparams_seed, step, val_acc and test_acc.
GROUP_KEYS: tuple[str, ...] = ("dataset", "algorithm", "model", "test_env", "trial_seed")
SWEEP_COLUMNS: tuple[str, ...] = (*GROUP_KEYS, "hparams_seed", "step", "val_acc", "test_acc", "run_dir")
#: record key of the validation domain of WILDS-style runs (written by `dgmoe.engine.evaluate`)
VAL_ENV = "wilds_val_env"
GROUPS_FIELD = "wilds_groups"  # the records' group field (`WildsOfficialSelection`)
OFFICIAL_VAL_METRIC = {"region": "acc_worst_group", "location_id": "f1_macro", "slide": "acc_avg"}
_NEEDED = frozenset((*GROUP_KEYS, "test_envs", "hparams_seed", "step", "n_envs", "run_dir", "file", "line", VAL_ENV,
                     "domains", GROUPS_FIELD, EXPLICIT_HPARAMS))


@dataclass(frozen=True)
class RunAcc:
    """The checkpoint a selection method picked in one run, with its validation and test accuracy."""

    val_acc: float
    test_acc: float
    step: int
    run_dir: str = ""
    val_tiebreak: float = float("nan")  # WorstGroupSelection: the validation split's overall accuracy


def _single(run: pd.DataFrame) -> pd.DataFrame:
    """The records of runs with exactly one test env, in file order (DomainBed's list order)."""
    single = run[run["test_envs"].map(len) == 1]
    order = [c for c in ("file", "line") if c in single.columns]
    return single.sort_values(order, kind="stable") if order else single


def _columns(run: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    missing = [k for k in keys if k not in run.columns]
    if missing:
        raise ValueError(f"records of {run['dataset'].iloc[0]} lack {missing} (see {run['file'].iloc[0]})")
    return run[list(keys)].astype(float)


def python_argmax(values: Sequence[float]) -> int | None:
    """Position of the item Python's `max` returns (DomainBed's `Q.argmax`); None for no values.

    The first maximum wins; `v > best` is False whenever a NaN is involved, so a NaN in first place is
    kept and a NaN later on is passed over.
    """
    best: int | None = None
    for i, value in enumerate(values):
        if best is None or value > values[best]:
            best = i
    return best


def rank_key(value: float) -> float:
    """Sort key of DomainBed's `Q.sorted`: NaN counts as -inf."""
    return float("-inf") if np.isnan(value) else float(value)


class SelectionMethod(ABC):
    """A way to pick a checkpoint within a run and to score it (DomainBed's `SelectionMethod`)."""

    key: ClassVar[str]
    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def run_acc(cls, run: pd.DataFrame, test_env: int) -> RunAcc | None:
        """(val_acc, test_acc) of one run (one hparams_seed of one group), or None if it cannot be scored."""

    @classmethod
    def hparams_accs(cls, group: pd.DataFrame, test_env: int) -> pd.DataFrame:
        """One row per scorable hparams_seed, best first, in DomainBed's order.

        Rows in ascending hparams_seed are stably sorted by val_acc (NaN as -inf) and then reversed, so
        among equal val_acc the largest hparams_seed comes first. Runs of one hparams_seed given other explicit
        hparams (`EXPLICIT_HPARAMS`) are rows of their own, in the order of their hparams' JSON.
        """
        rows = []
        keys = ["hparams_seed", EXPLICIT_HPARAMS] if EXPLICIT_HPARAMS in group.columns else ["hparams_seed"]
        for (hseed, *_), run in group.groupby(keys, sort=True):
            acc = cls.run_acc(run, test_env)
            if acc is not None:
                rows.append({"hparams_seed": hseed, **acc.__dict__})
        rows = sorted(rows, key=cls.rank)[::-1]
        return pd.DataFrame(rows, columns=["hparams_seed", "val_acc", "test_acc", "step", "run_dir"])

    @classmethod
    def rank(cls, row: Mapping[str, Any]) -> Any:
        """Sort key of a run by its validation score (DomainBed: val_acc, NaN as -inf)."""
        return rank_key(row["val_acc"])

    @classmethod
    def sweep_acc(cls, group: pd.DataFrame, test_env: int) -> dict | None:
        """The best run of the hparams sweep (argmax of val_acc), or None if no run can be scored."""
        ranked = cls.hparams_accs(group, test_env)
        return None if ranked.empty else ranked.iloc[0].to_dict()
