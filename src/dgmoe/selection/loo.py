"""Leave-one-domain-out cross-validation (DomainBed's `LeaveOneOutSelectionMethod`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from dgmoe.selection.base import RunAcc, SelectionMethod, _single, python_argmax


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
