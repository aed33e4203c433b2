"""The protocol lines every results table carries: what the numbers were obtained under.

Numbers are compared across selection methods, step budgets, numbers of trials and hparams draws, pretraining
sources and dataset versions without the tables saying which (DomainBed #37, #89; GMoE #4, #9; SWAD #12: DomainNet
at 5k vs 15k steps; MIRO #9: TerraIncognita with 24,788 or 24,330 images). Each table therefore states:

- Selection: the model-selection method(s) of its cells;
- Steps: the training steps of the runs (`args.steps`; soups: their members');
- Trials and hparams draws: the trial seeds and the hparams draws per (dataset, algorithm, model, held-out
  domains, trial), as found in the records;
- Pretrained weights: the `--pretrained` file's name and the first 12 hex digits of its SHA-256 ("from scratch"
  when none), so that two checkpoints with one name are told apart;
- Dataset version: the image count of each domain, as the runs' `config.json` recorded it (`dataset.sizes`,
  after `--n-per-domain`), so that two releases of one dataset are told apart;
- dgmoe: the version that wrote the table and the versions that trained the runs (`provenance.dgmoe`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from dgmoe.document import Protocol
from dgmoe.engine.provenance import pretrained_identity
from dgmoe.report.text import count


def _run_configs(records: pd.DataFrame) -> dict[str, dict[str, Any]]:
    out = {}
    for run_dir in sorted(set(records["run_dir"])) if "run_dir" in records else []:
        try:
            config = json.loads((Path(run_dir) / "config.json").read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(config, dict):
            out[str(run_dir)] = config
    return out


def _pretrained(args: dict[str, Any], config: dict[str, Any] | None) -> str:
    """The pretrained weights of a run as it recorded them when it started (`initialisation`), else the file as it
    is now (runs trained before dgmoe recorded it)."""
    recorded = (config or {}).get("initialisation")
    if isinstance(recorded, str):
        return "none (trained from scratch)" if recorded.startswith("random init") else recorded
    return pretrained_identity(args.get("pretrained")) or "none (trained from scratch)"


def _ints(values: Any) -> list[int]:
    return sorted({int(v) for v in values if v is not None and not pd.isna(v)})


def _span(values: Sequence[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else f"{min(values)} to {max(values)}"


def protocol_items(records: pd.DataFrame, selection: str) -> list[tuple[str, str]]:
    """(name, value) of each protocol line for the runs of `records`, under the model selection `selection`."""
    from dgmoe import __version__

    by_dir = _run_configs(records)
    configs = list(by_dir.values())
    args = [r.get("args") or {} for r in records["record"]] if "record" in records else []
    steps = _ints(a.get("steps") for a in args)
    member_steps = _ints(s for a in args for s in (a.get("soup") or {}).get("member_steps", []))
    steps_text = ", ".join(map(str, steps)) or "unrecorded"
    if member_steps:
        steps_text += f" (soups: members at steps {_span(member_steps)})"
    trials = _ints(records["trial_seed"]) if "trial_seed" in records else []
    runs = records[[not (a.get("soup")) for a in args]] if len(args) == len(records) and len(records) else records
    cells = runs.groupby(["dataset", "algorithm", "model", "test_envs", "trial_seed"])["hparams_seed"].nunique() \
        if len(runs) else pd.Series(dtype=int)
    dirs = records["run_dir"] if "run_dir" in records else [None] * len(args)
    pretrained = sorted({_pretrained(a, by_dir.get(str(d))) for a, d in zip(args, dirs)})
    versions: dict[str, set[str]] = {}
    for config in configs:
        data = config.get("dataset") or {}
        sizes = data.get("sizes")
        if data.get("name") and sizes:
            domains = data.get("domains") or [f"env{i}" for i in range(len(sizes))]
            versions.setdefault(data["name"], set()).add(", ".join(f"{d}={n}" for d, n in zip(domains, sizes))
                                                         + f" ({sum(sizes)} images)")
    for name in sorted(set(records["dataset"])) if "dataset" in records else []:
        versions.setdefault(name, {"image counts unrecorded"})
    trained_by = sorted({str((c.get("provenance") or {}).get("dgmoe")) for c in configs
                         if (c.get("provenance") or {}).get("dgmoe")})
    return [
        ("Selection", selection),
        ("Steps", steps_text),
        ("Trials", f"{count(len(trials), 'trial seed')} ({', '.join(map(str, trials))})" if trials else "none"),
        ("Hparams draws", f"{_span(sorted(cells.tolist()))} per cell" if len(cells) else "none"),
        ("Pretrained weights", "; ".join(pretrained) or "unrecorded"),
        ("Dataset version", "; ".join(f"{name}: {' | '.join(sorted(v))}" for name, v in sorted(versions.items()))
         or "unrecorded"),
        ("dgmoe", __version__ + (f" (runs trained with {', '.join(trained_by)})" if trained_by else "")),
    ]


def protocol_block(records: pd.DataFrame, selection: str) -> Protocol:
    """The protocol lines (`protocol_items`) as a block of a results `Document`."""
    return Protocol(tuple(protocol_items(records, selection)))
