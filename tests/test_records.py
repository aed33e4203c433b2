"""`dgmoe.records.train_domain_val_acc` is the one training-domain validation accuracy: DomainBed's np.mean in
env order, the value `IIDAccuracySelection` selects with, NaN without a training domain."""
import math

import numpy as np
import pandas as pd

from dgmoe.records import train_domain_val_acc, train_envs
from dgmoe.selection import IIDAccuracySelection


def _record(step: int, outs: list[float], test_envs: list[int]) -> dict:
    rec = {"step": step, "args": {"domains": [f"d{i}" for i in range(len(outs))], "test_envs": test_envs}}
    for i, acc in enumerate(outs):
        rec[f"env{i}_out_acc"], rec[f"env{i}_in_acc"] = acc, acc / 2
    return rec


def test_mean_over_training_domains_in_env_order():
    outs = [0.1, 0.7, 0.2, 0.3]
    rec = _record(0, outs, [1])
    assert train_envs(4, [1]) == [0, 2, 3]
    assert train_domain_val_acc(rec) == float(np.mean([0.1, 0.2, 0.3]))
    assert train_domain_val_acc(rec, test_envs=[0]) == float(np.mean([0.7, 0.2, 0.3]))
    assert math.isnan(train_domain_val_acc(_record(0, [0.5], [0])))


def test_selection_selects_with_the_same_value():
    recs = [_record(s, [0.1 * s, 0.9, 0.3 / (s + 1), 0.2], [1]) for s in range(4)]
    frame = pd.DataFrame([{**r, "n_envs": 4, "test_envs": (1,), "run_dir": "r"} for r in recs])
    chosen = IIDAccuracySelection.run_acc(frame, 1)
    best = max(recs, key=train_domain_val_acc)
    assert chosen is not None and chosen.step == best["step"]
    assert chosen.val_acc == train_domain_val_acc(best)
