"""Worst-group validation (WILDS, Koh et al., ICML 2021; MoGE §2.3) and WILDS' two named variants: the ID
validation split and WILDS' official metric per dataset."""
from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from dgmoe.selection.base import (
    GROUPS_FIELD,
    OFFICIAL_VAL_METRIC,
    VAL_ENV,
    RunAcc,
    SelectionMethod,
    _single,
    python_argmax,
    rank_key,
)


def worst_group_checkpoint(records: Sequence[Mapping[str, Any]], val_keys: Sequence[str],
                           tiebreak_key: str | None = None) -> int | None:
    """Position of the checkpoint with the best worst-group validation accuracy, the minimum over `val_keys`
    (one split's `env{v}_acc_worst_group`, or the training domains' `env{j}_out_acc`); equal ones go to the
    higher `tiebreak_key`, then to the first in list order (Python's `max`, as `python_argmax`; a NaN
    minimum never wins). None for no records."""
    scores = [(float(np.min([float(r[k]) for k in val_keys])),
               float(r[tiebreak_key]) if tiebreak_key else 0.0) for r in records]
    return python_argmax(scores)  # type: ignore[arg-type]


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
