"""Facts about one training record (a line of a run's `results.jsonl`) that several packages read.

`train_domain_val_acc` is DomainBed's training-domain validation accuracy (Gulrajani & Lopez-Paz, 2021, §3,
"training-domain validation set"): the mean of `env{j}_out_acc` over the training domains j, in env order,
with `np.mean`'s arithmetic (`model_selection.IIDAccuracySelectionMethod`). The trainer's `best.safetensors`
criterion, the live checkpoint line, the report's selected checkpoint, the quickstart summary and
`dgmoe.selection.IIDAccuracySelection` all use it (the latter row-wise over a frame of the same keys).
"""
from __future__ import annotations

import math
from typing import Any, Collection, Mapping

import numpy as np

#: WILDS' own name of a record metric suffix ("{groups}": the group field, e.g. FMoW's `acc_worst_region`;
#: iWildCam's macro-F1 is WILDS' `F1-macro_all`)
WILDS_METRIC_NAMES: dict[str, str] = {"acc_avg": "acc_avg", "acc_worst_group": "acc_worst_{groups}",
                                      "f1_macro": "F1-macro_all"}


def train_envs(n_envs: int, test_envs: Collection[int]) -> list[int]:
    """The training domains of a run over `n_envs` domains that holds out `test_envs`, in env order."""
    return [j for j in range(n_envs) if j not in test_envs]


def train_val_keys(n_envs: int, test_envs: Collection[int]) -> list[str]:
    """The record keys training-domain validation averages: `env{j}_out_acc` of every training domain j."""
    return [f"env{j}_out_acc" for j in train_envs(n_envs, test_envs)]


def train_domain_val_acc(record: Mapping[str, Any], test_envs: Collection[int] | None = None,
                         n_envs: int | None = None) -> float:
    """Training-domain validation accuracy of one record (NaN without a training domain); `test_envs` and
    `n_envs` default to the record's own `args` (`test_envs`, `domains`)."""
    args = record.get("args") or {}
    n = n_envs if n_envs is not None else len(args["domains"])
    keys = train_val_keys(n, args["test_envs"] if test_envs is None else test_envs)
    return float(np.mean([as_float(record.get(k)) for k in keys])) if keys else math.nan


def as_float(value: Any) -> float:
    """A record's number as a float; a missing one (None: JSON's null, how records write "no value") as NaN."""
    return math.nan if value is None else float(value)
