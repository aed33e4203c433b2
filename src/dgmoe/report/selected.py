"""What each cell of a results table selected: per (row, held-out domain, trial seed), the hparams draw, the
checkpoint step, the test accuracy and the hparams of that run, with the run folder that holds its log and
config (MIRO #5, #17; DomainBed #32: "which hparams gave this number?").

Only the hparams that differ between the runs of the dataset are spelled out ("defaults" when all are
equal), so that a row stays readable with DomainBed's dozen hparams; a soup (`dgmoe soup`) reads "uniform of 3
runs" (its members are in its record's `args.soup`).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import pandas as pd

from dgmoe.document import Table
from dgmoe.report.tables import RowKey, dataset_domains, row_labels

RUN_COLUMN = "Run (log, config)"  # the run folder that holds the selected checkpoint's log and config


def run_hparams(records: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """{run_dir: the hparams of its first record}."""
    out: dict[str, dict[str, Any]] = {}
    for run_dir, record in zip(records["run_dir"], records["record"]):
        if run_dir not in out:
            out[run_dir] = dict(record.get("hparams") or {})
    return out


def _varying(hparams: Mapping[str, Mapping[str, Any]]) -> list[str]:
    keys = sorted({k for h in hparams.values() for k in h})
    return [k for k in keys if len({json.dumps(h.get(k), sort_keys=True) for h in hparams.values()}) > 1]


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else json.dumps(value) if isinstance(value, (dict, list)) \
        else str(value)


def selected_table(records: pd.DataFrame, sweep: pd.DataFrame, dataset: str,
                   names: Mapping[RowKey, str] | None = None) -> Table:
    """A table of the runs one selection method chose for `dataset` (one line per row, domain and trial)."""
    domains = dataset_domains(records, dataset)
    mine = sweep[sweep["dataset"] == dataset].sort_values(["algorithm", "model", "test_env", "trial_seed"])
    hparams = run_hparams(records[records["dataset"] == dataset])
    varying = _varying({d: h for d, h in hparams.items() if "soup" not in h})
    labels = row_labels(sorted(set(zip(mine["algorithm"], mine["model"]))), names)
    rows = []
    for pick in mine.to_dict("records"):
        chosen = hparams.get(pick["run_dir"], {})
        text = (f"{chosen['soup']} of {chosen.get('members')} runs" if "soup" in chosen
                else ", ".join(f"{k}={_short(chosen[k])}" for k in varying if k in chosen) or "defaults")
        rows.append([labels[(pick["algorithm"], pick["model"])], domains[int(pick["test_env"])],
                     int(pick["trial_seed"]), int(pick["hparams_seed"]), int(pick["step"]),
                     100 * float(pick["test_acc"]), text, str(pick["run_dir"])])
    return Table.make(f"{dataset}: selected runs", ["Algorithm", "Domain", "Trial", "Hparams seed", "Step",
                                                    "Test acc", "Hparams", RUN_COLUMN], rows)
