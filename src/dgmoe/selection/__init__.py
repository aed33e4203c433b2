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

One module per method (`iid`, `loo`, `oracle`, `worst`), their shared interface in `base`, and the sweep-level
selection (`sweep`: `sweep_accs`, `mean_and_se`, the methods by key).
"""
from __future__ import annotations

from dgmoe.selection.base import (
    GROUP_KEYS,
    GROUPS_FIELD,
    OFFICIAL_VAL_METRIC,
    SWEEP_COLUMNS,
    VAL_ENV,
    RunAcc,
    SelectionMethod,
    python_argmax,
    rank_key,
)
from dgmoe.selection.iid import IIDAccuracySelection
from dgmoe.selection.loo import LeaveOneOutSelection
from dgmoe.selection.oracle import OracleSelection
from dgmoe.selection.sweep import (
    SELECTION_METHODS,
    MethodLike,
    get_selection,
    iter_groups,
    mean_and_se,
    resolve_selections,
    sweep_accs,
)
from dgmoe.selection.worst import (
    IDWorstGroupSelection,
    WildsOfficialSelection,
    WorstGroupSelection,
    worst_group_checkpoint,
)

__all__ = [
    "GROUPS_FIELD", "GROUP_KEYS", "IDWorstGroupSelection", "IIDAccuracySelection", "LeaveOneOutSelection",
    "MethodLike", "OFFICIAL_VAL_METRIC", "OracleSelection", "RunAcc", "SELECTION_METHODS", "SWEEP_COLUMNS",
    "SelectionMethod", "VAL_ENV", "WildsOfficialSelection", "WorstGroupSelection", "get_selection", "iter_groups",
    "mean_and_se", "python_argmax", "rank_key", "resolve_selections", "sweep_accs", "worst_group_checkpoint",
]
