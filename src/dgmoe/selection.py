"""Model selection over training records, with DomainBed's arithmetic (Gulrajani & Lopez-Paz, 2021, §3).

The records DataFrame comes from `dgmoe.report.collect.load_records`. A *group* is one (dataset, algorithm,
model, test env, trial seed); every record whose `test_envs` contains the test env belongs to it (pair runs
`[t, v]` are what leave-one-domain-out needs). Within a group, the records of one `hparams_seed` form a *run*;
a selection method turns a run into (val_acc, test_acc) at one chosen checkpoint (`run_acc`), and the run
with the best val_acc gives the group's test accuracy (`sweep_acc`).

Ties and NaN follow DomainBed (`model_selection.py`, `lib/query.py`) exactly, so that `dgmoe results` prints
the numbers `collect_results.py` prints (checked cell by cell in `tests/parity/test_selection_parity.py`):

- *Checkpoint within a run.* DomainBed's `Q.argmax` is Python's `max`: the first maximum in list order wins.
  `iid` scans the single-test-env records in file (line) order, `loo` scans steps in ascending numeric order
  (`Q.group` sorts int keys as ints). A NaN never wins a comparison, so a NaN in *first* place is kept (its
  run then ranks as -inf) and a NaN anywhere else is passed over. `oracle` takes the last record after a
  stable sort by step (the last line of the highest step).
- *Run across hparams seeds.* Runs are visited in ascending numeric `hparams_seed`, stably sorted by val_acc
  (NaN as -inf) and the order reversed: on equal val_acc the **largest hparams_seed** wins, and when every
  val_acc is NaN, the largest hparams_seed is taken too.
- *Arithmetic.* IID val_acc is `np.mean` over the training domains in env order, LOO's is `np.sum` / (n - 1),
  so ties are exact ties in both tools.

A fourth method, `worst` (`WorstGroupSelection`), is worst-group validation (WILDS, Koh et al., ICML 2021;
MoGE §2.3): for datasets with WILDS metrics it picks the checkpoint with the best worst-group accuracy on
the dataset's OOD validation split, elsewhere the one whose worst training domain does best on its
held-out part. It is not one of DomainBed's and leaves their three unchanged (nor do its variants below).

dgmoe's extensions, none of which changes a number on a DomainBed-style sweep: `model` is part of the group (in
dgmoe the backbone is a choice as large as the algorithm; DomainBed records have none); two run dirs with one
configuration are an error (DomainBed merges their records); if both pair runs `[t, v]` and `[v, t]` exist,
LOO averages them (DomainBed launches only `[t, v]` with t < v; given both it keeps the last read).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from dgmoe.records import train_val_keys
from dgmoe.registry import Registry

#: one selected accuracy per group: these keys plus the chosen hparams_seed, step, val_acc and test_acc.
GROUP_KEYS: tuple[str, ...] = ("dataset", "algorithm", "model", "test_env", "trial_seed")
SWEEP_COLUMNS: tuple[str, ...] = (*GROUP_KEYS, "hparams_seed", "step", "val_acc", "test_acc", "run_dir")
#: record key of the validation domain of WILDS-style runs (written by `dgmoe.engine.evaluate`)
VAL_ENV = "wilds_val_env"
GROUPS_FIELD = "wilds_groups"  # the records' group field (`WildsOfficialSelection`)
OFFICIAL_VAL_METRIC = {"region": "acc_worst_group", "location_id": "f1_macro", "slide": "acc_avg"}
_NEEDED = frozenset((*GROUP_KEYS, "test_envs", "hparams_seed", "step", "n_envs", "run_dir", "file", "line", VAL_ENV,
                     "domains", GROUPS_FIELD))


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


def worst_group_checkpoint(records: Sequence[Mapping[str, Any]], val_keys: Sequence[str],
                           tiebreak_key: str | None = None) -> int | None:
    """Position of the checkpoint with the best worst-group validation accuracy, the minimum over `val_keys`
    (one split's `env{v}_acc_worst_group`, or the training domains' `env{j}_out_acc`); equal ones go to the
    higher `tiebreak_key`, then to the first in list order (Python's `max`, as `python_argmax`; a NaN
    minimum never wins). None for no records."""
    scores = [(float(np.min([float(r[k]) for k in val_keys])),
               float(r[tiebreak_key]) if tiebreak_key else 0.0) for r in records]
    return python_argmax(scores)  # type: ignore[arg-type]


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
        among equal val_acc the largest hparams_seed comes first.
        """
        rows = []
        for hseed, run in group.groupby("hparams_seed", sort=True):
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


class IIDAccuracySelection(SelectionMethod):
    """Training-domain validation: the checkpoint with the best mean `env{j}_out_acc` over training domains j."""

    key = "iid"
    name = "training-domain validation set"

    @classmethod
    def run_acc(cls, run: pd.DataFrame, test_env: int) -> RunAcc | None:
        single = _single(run)
        if single.empty:
            return None
        n_envs = int(single["n_envs"].iloc[0])
        val_keys = train_val_keys(n_envs, [test_env])  # as `dgmoe.records.train_domain_val_acc`, row-wise
        # row-wise np.mean of a C-contiguous array sums in the same order as DomainBed's np.mean(list)
        accs = np.ascontiguousarray(_columns(single, val_keys).to_numpy(dtype=float))
        val = accs.mean(axis=1) if val_keys else np.full(len(single), np.nan)
        best = python_argmax(list(val))
        if best is None:
            return None
        rec = single.iloc[best]
        return RunAcc(float(val[best]), float(rec[f"env{test_env}_in_acc"]), int(rec["step"]), rec["run_dir"])


class OracleSelection(SelectionMethod):
    """Test-domain validation (oracle): the *last* checkpoint, val = `env{t}_out_acc`, test = `env{t}_in_acc`."""

    key = "oracle"
    name = "test-domain validation set (oracle)"

    @classmethod
    def run_acc(cls, run: pd.DataFrame, test_env: int) -> RunAcc | None:
        single = _single(run)
        if single.empty:
            return None
        rec = single.sort_values("step", kind="stable").iloc[-1]
        return RunAcc(
            float(rec[f"env{test_env}_out_acc"]), float(rec[f"env{test_env}_in_acc"]), int(rec["step"]),
            rec["run_dir"],
        )


class LeaveOneOutSelection(SelectionMethod):
    """Leave-one-domain-out cross-validation.

    At each step, val = sum over v != t of `env{v}_in_acc` from the run with test_envs {t, v}, divided by
    (n_envs - 1); test = `env{t}_in_acc` of the single-test-env run at that step. A step where any pair
    run is missing, or where the single run has no record or several, cannot be scored; a run with no
    scorable step gives "X". The first best step in ascending order wins (a NaN first step is kept).
    Should both [t, v] and [v, t] runs exist, their env{v}_in_acc are averaged (a dgmoe extension).
    """

    key = "loo"
    name = "leave-one-domain-out cross-validation"

    @classmethod
    def run_acc(cls, run: pd.DataFrame, test_env: int) -> RunAcc | None:
        single = _single(run)
        if single.empty:
            return None
        n_envs = int(single["n_envs"].iloc[0])
        others = [v for v in range(n_envs) if v != test_env]
        pairs = run[run["test_envs"].map(len) == 2]
        if pairs.empty or not others:
            return None
        found: dict[int, dict[int, list[float]]] = {}
        for rec in pairs.to_dict("records"):
            v = next(e for e in rec["test_envs"] if e != test_env)
            found.setdefault(int(rec["step"]), {}).setdefault(v, []).append(float(rec[f"env{v}_in_acc"]))
        counts = single["step"].value_counts()
        scored = [
            (step, float(np.sum([float(np.mean(accs[v])) for v in others])) / (n_envs - 1))
            for step, accs in sorted(found.items())
            if counts.get(step, 0) == 1 and all(v in accs for v in others)
        ]
        pick = python_argmax([val for _, val in scored])
        if pick is None:
            return None
        best, val = scored[pick]
        rec = single[single["step"] == best].iloc[0]
        return RunAcc(val, float(rec[f"env{test_env}_in_acc"]), int(best), rec["run_dir"])


class WorstGroupSelection(SelectionMethod):
    """Worst-group validation (WILDS' model selection for FMoW, `acc_worst_region` on the OOD val split; MoGE).

    Runs whose records name a validation domain v (`wilds_val_env`: a WILDS dataset whose v is held out):
    the checkpoint with the best `env{v}_acc_worst_group` (equal ones: the higher `env{v}_acc_avg`, then
    the first in file order); val = that worst-group accuracy, test = `env{t}_acc_avg`, the accuracy on the
    whole held-out split t (t = v is not scored). Other runs, with one test domain as `iid`: the checkpoint
    whose worst training domain has the best `env{j}_out_acc` (GeoMNIST's rule); test = `env{t}_in_acc`.
    Across hparams seeds the best val wins, then the higher tie-break, then DomainBed's largest seed.
    """

    key = "worst"
    name = "worst-group validation"
    VAL_SPLIT: ClassVar[str | None] = None  # None: the OOD validation domain the records name (`wilds_val_env`)
    OFFICIAL: ClassVar[bool] = False  # select on WILDS' official metric instead of the worst group's accuracy

    @classmethod
    def run_acc(cls, run: pd.DataFrame, test_env: int) -> RunAcc | None:
        wilds = run[run[VAL_ENV].notna()] if VAL_ENV in run.columns else run.iloc[0:0]
        if not wilds.empty:
            order = [c for c in ("file", "line") if c in wilds.columns]
            wilds = wilds.sort_values(order, kind="stable")
            val_env = cls.val_env(wilds)
            if val_env is None or test_env == val_env:
                return None
            val, tie = f"env{val_env}_{cls.val_metric(wilds)}", f"env{val_env}_acc_avg"
            recs = wilds.to_dict("records")
            best = worst_group_checkpoint(recs, [val], tie)
            if best is None:
                return None
            rec = recs[best]
            return RunAcc(float(rec[val]), float(rec[f"env{test_env}_acc_avg"]), int(rec["step"]), rec["run_dir"],
                          float(rec[tie]))
        single = _single(run)
        if single.empty:
            return None
        n_envs = int(single["n_envs"].iloc[0])
        keys = [f"env{j}_out_acc" for j in range(n_envs) if j != test_env]
        recs = single.to_dict("records")
        best = worst_group_checkpoint(recs, keys)
        if best is None:
            return None
        rec = recs[best]
        return RunAcc(float(np.min([float(rec[k]) for k in keys])), float(rec[f"env{test_env}_in_acc"]),
                      int(rec["step"]), rec["run_dir"])

    @classmethod
    def val_env(cls, wilds: pd.DataFrame) -> int | None:
        """The validation domain: the OOD one the records name, or `VAL_SPLIT` when held out (else None)."""
        if cls.VAL_SPLIT is None:
            return int(wilds[VAL_ENV].iloc[0])
        domains = wilds["domains"].iloc[0] or ()
        held = [i for i in wilds["test_envs"].iloc[0] if tuple(domains[i:i + 1]) == (cls.VAL_SPLIT,)]
        return held[0] if held else None

    @classmethod
    def val_metric(cls, wilds: pd.DataFrame) -> str:
        """The record key suffix of the validation metric: the worst group's, or WILDS' own with `OFFICIAL`."""
        groups = wilds[GROUPS_FIELD].dropna().astype(str).tolist() if cls.OFFICIAL and GROUPS_FIELD in wilds else []
        return OFFICIAL_VAL_METRIC.get(groups[0], "acc_worst_group") if groups else "acc_worst_group"

    @classmethod
    def rank(cls, row: Mapping[str, Any]) -> Any:
        return rank_key(row["val_acc"]), rank_key(row["val_tiebreak"])


class IDWorstGroupSelection(WorstGroupSelection):
    """WILDS' named ID alternative: the same rule on the in-distribution split `id_val` (Koh et al., 2021, Sec. 5)."""
    key, name, VAL_SPLIT = "worst-id", "worst-group validation on the ID validation split (id_val)", "id_val"


class WildsOfficialSelection(WorstGroupSelection):
    """WILDS' own selection: its `val_metric` on the OOD split (`OFFICIAL_VAL_METRIC`, by the group field)."""
    key, name, OFFICIAL = "wilds", "WILDS' official validation metric on the OOD validation split", True


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


#: what makes two run dirs the same run configuration in a table
RUN_KEYS = ["dataset", "algorithm", "model", "test_envs", "hparams_seed", "trial_seed"]


def duplicate_runs(records: pd.DataFrame) -> dict[tuple, list[str]]:
    """{run configuration: its run dirs, sorted} for every configuration found in several run dirs."""
    if records.empty:
        return {}
    dirs = records.groupby(RUN_KEYS, sort=True)["run_dir"].unique()
    return {key: sorted(found) for key, found in dirs.items() if len(found) > 1}


def check_unique_runs(records: pd.DataFrame) -> None:
    """Refuse two run dirs with the same configuration: their checkpoints would be mixed into one run."""
    dup = duplicate_runs(records)
    if dup:
        key, found = next(iter(dup.items()))
        raise ValueError(
            f"{len(dup)} run configuration(s) appear in several run dirs, e.g. {dict(zip(RUN_KEYS, key))} in "
            f"{found}; remove the extra runs or report them from separate roots"
        )


def drop_duplicate_runs(records: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Keep one run dir (the first, sorted) of every configuration found in several, so that tables mix no two
    runs' checkpoints; the message (None: no duplicate) names how many were left out and an example."""
    dup = duplicate_runs(records)
    if not dup:
        return records, None
    extra = {d for found in dup.values() for d in found[1:]}
    key, found = next(iter(dup.items()))
    n = len(dup)
    dataset, algorithm, model, test_envs, hparams_seed, trial_seed = key
    what = (f"{dataset} / {algorithm} / {model} / test envs {', '.join(map(str, test_envs))} / hparams seed "
            f"{hparams_seed} / trial seed {trial_seed}")
    message = (f"{n} run configuration{'' if n == 1 else 's'} appear{'s' if n == 1 else ''} in several run dirs "
               f"(e.g. {what} in {', '.join(found)}); the tables use the first dir of each and leave out "
               f"{len(extra)} duplicate run dir{'' if len(extra) == 1 else 's'}")
    return records[~records["run_dir"].isin(extra)].reset_index(drop=True), message


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
