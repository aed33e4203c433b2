"""Training-domain validation (DomainBed's `IIDAccuracySelectionMethod`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from dgmoe.records import train_val_keys
from dgmoe.selection.base import RunAcc, SelectionMethod, _columns, _single, python_argmax


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
