"""The selection methods by key, and a sweep's selected accuracy per group (DomainBed's `collect_results.py`
arithmetic): `sweep_accs`, `mean_and_se`."""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pandas as pd

from dgmoe.duplicates import check_unique_runs
from dgmoe.registry import Registry
from dgmoe.selection.base import _NEEDED, GROUP_KEYS, SWEEP_COLUMNS, SelectionMethod
from dgmoe.selection.iid import IIDAccuracySelection
from dgmoe.selection.loo import LeaveOneOutSelection
from dgmoe.selection.oracle import OracleSelection
from dgmoe.selection.worst import IDWorstGroupSelection, WildsOfficialSelection, WorstGroupSelection

SELECTION_METHODS: Registry = Registry("selection method")
for _method in (IIDAccuracySelection, LeaveOneOutSelection, OracleSelection, WorstGroupSelection,
                IDWorstGroupSelection, WildsOfficialSelection):
    SELECTION_METHODS.add(_method.key, _method)

MethodLike = str | type[SelectionMethod]


def get_selection(method: MethodLike) -> type[SelectionMethod]:
    """A selection method class from its key (`iid`, `loo`, `oracle`, `worst`) or the class itself."""
    if isinstance(method, type) and issubclass(method, SelectionMethod):
        return method
    return SELECTION_METHODS.get(str(method))


def resolve_selections(selection: MethodLike | Iterable[MethodLike]) -> list[type[SelectionMethod]]:
    """`"all"` -> the three DomainBed methods in DomainBed's order; otherwise one key/class or a list of them."""
    if selection == "all":
        return [IIDAccuracySelection, LeaveOneOutSelection, OracleSelection]
    if isinstance(selection, (str, type)):
        return [get_selection(selection)]
    return [get_selection(m) for m in selection]


def iter_groups(records: pd.DataFrame) -> Iterator[tuple[tuple, pd.DataFrame]]:
    """(group key, records) for every (dataset, algorithm, model, test_env, trial_seed) that has records."""
    records = records[records["test_envs"].map(len) > 0]
    if records.empty:
        return
    exploded = records.assign(test_env=records["test_envs"].map(list)).explode("test_env")
    exploded["test_env"] = exploded["test_env"].astype(int)
    for key, group in exploded.groupby(list(GROUP_KEYS), sort=True):
        yield key, group


def sweep_accs(records: pd.DataFrame, method: MethodLike) -> pd.DataFrame:
    """One row per group that the method can score: the selected hparams_seed, step, val_acc and test_acc."""
    cls = get_selection(method)
    check_unique_runs(records)
    records = records[[c for c in records.columns if c in _NEEDED or c.startswith("env")]]
    rows = []
    for key, group in iter_groups(records):
        best = cls.sweep_acc(group, test_env=key[GROUP_KEYS.index("test_env")])
        if best is not None:
            rows.append({**dict(zip(GROUP_KEYS, key)), **best})
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))


def mean_and_se(accs: Iterable[float]) -> tuple[float, float] | None:
    """Mean and standard error in percent, DomainBed's way: 100*mean(x), 100*std(x)/sqrt(n) with ddof=0."""
    x = np.asarray(list(accs), dtype=float)
    if x.size == 0:
        return None
    return float(100 * x.mean()), float(100 * np.std(x / np.sqrt(x.size)))
