"""The line a run ends with: its test accuracy at the last step and at the checkpoint model selection picks,
each under the protocol `dgmoe results` reports the run with.

- DomainBed-style runs: the mean `env{t}_in_acc` over held-out domains t, at the checkpoint training-domain
  validation picks (the first best mean `env{j}_out_acc` over training domains j; Gulrajani & Lopez-Paz,
  2021, §3). A run whose records hold no validation accuracy says so: no number stands in for one.
- WILDS runs that hold out their OOD validation split (records name it, `wilds_val_env`): WILDS' official
  metric (FMoW `acc_worst_region`, iWildCam `F1-macro_all`, Camelyon17 `acc_avg`; Koh et al., WILDS, ICML 2021,
  Table 1 and Sec. 5) of every other held-out split, at the checkpoint with the best official metric on the
  OOD validation split (`dgmoe.selection.WildsOfficialSelection`, `dgmoe results --selection wilds`).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from dgmoe.records import WILDS_METRIC_NAMES, as_float, train_domain_val_acc
from dgmoe.selection import GROUPS_FIELD, OFFICIAL_VAL_METRIC, VAL_ENV, worst_group_checkpoint


def test_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """`step`, `test_acc` (mean `env{t}_in_acc` over the held-out domains) and `test_accs` per domain."""
    args = record["args"]
    accs = {args["domains"][i]: as_float(record[f"env{i}_in_acc"]) for i in args["test_envs"]}
    return {"step": record["step"], "test_acc": sum(accs.values()) / len(accs), "test_accs": accs}


def selected_by_training_domains(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The checkpoint training-domain validation selects (the first with the best mean training-domain `out`
    accuracy, as DomainBed within a run) with its `val_acc`; None when no record has a validation accuracy."""
    best, best_val = None, -math.inf
    for record in records:
        val = train_domain_val_acc(record)
        if math.isfinite(val) and val > best_val:
            best, best_val = record, val
    return None if best is None else {**test_summary(best), "val_acc": best_val}


def wilds_closing(records: Sequence[Mapping[str, Any]]) -> str | None:
    """'<metric> at step S chosen by ...: split value, ...; at the last step (N): ...' for a run whose records
    name a held-out OOD validation split; None for other runs."""
    last = records[-1]
    if last.get(VAL_ENV) is None or last.get(GROUPS_FIELD) is None:
        return None
    v, groups = int(last[VAL_ENV]), str(last[GROUPS_FIELD])
    suffix = OFFICIAL_VAL_METRIC.get(groups, "acc_worst_group")
    title = WILDS_METRIC_NAMES[suffix].format(groups=groups)
    args = last["args"]
    tests = [t for t in args["test_envs"] if t != v]

    def values(record: Mapping[str, Any]) -> str:
        return ", ".join(f"{args['domains'][t]} {as_float(record.get(f'env{t}_{suffix}')):.4f}" for t in tests)

    pick = worst_group_checkpoint(records, [f"env{v}_{suffix}"], f"env{v}_acc_avg")
    if pick is None or not math.isfinite(as_float(records[pick].get(f"env{v}_{suffix}"))):
        chosen = f"no checkpoint chosen (no {title} on {args['domains'][v]})"
    else:
        rec = records[pick]
        chosen = (f"{values(rec)} at step {rec['step']} chosen by WILDS' validation metric on the OOD split "
                  f"{args['domains'][v]} ({as_float(rec[f'env{v}_{suffix}']):.4f})")
    return f"WILDS {title} {chosen}; at the last step ({last['step']}): {values(last)}"


def finished_line(output_dir: Any, records: Sequence[Mapping[str, Any]]) -> str:
    """The line `dgmoe train` ends with (see the module docstring)."""
    wilds = wilds_closing(records)
    if wilds is not None:
        return f"finished {output_dir}: {wilds}"
    final, chosen = test_summary(records[-1]), selected_by_training_domains(records)
    line = f"finished {output_dir}: test accuracy {final['test_acc']:.4f} at the last step ({final['step']}), "
    if chosen is None:
        return line + "no checkpoint chosen by training-domain validation (no validation accuracy was recorded)"
    return line + (f"{chosen['test_acc']:.4f} at step {chosen['step']} chosen by training-domain validation "
                   f"({chosen['val_acc']:.4f})")
