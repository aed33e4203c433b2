"""Test-domain validation, the oracle (DomainBed's `OracleSelectionMethod`)."""
from __future__ import annotations

import pandas as pd

from dgmoe.selection.base import RunAcc, SelectionMethod, _single


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
