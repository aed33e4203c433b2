"""What a run computed, beyond what its table row is named by: the facts that keep two computations apart.

A results row is (algorithm, model), the model with its overrides, PEFT settings and head (`collect.model_label`).
Runs of one row can still have computed different things: a zero-shot evaluation (`--steps 0`) and a fine-tune
from it, runs on another subsample (`--n-per-domain`) or split (`--holdout-fraction`), runs from other weights
(the image tower's file and content hash, as the run recorded it when it started; `--text-pretrained`'s file and
hash). These facts are a run's *identity*; where runs of one (dataset, algorithm, model) differ in them, each
identity becomes a row of its own, named by the facts that differ (`vit_micro_patch7_28 [--steps 0]` beside
`vit_micro_patch7_28 [--steps 30]`), so that no cell averages over, and no duplicate rule drops, a run that
computed something else. Runs that agree on them (every sweep, old run folders that record none) keep their name.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Hashable, Sequence

import pandas as pd

from dgmoe.engine.config import RunConfig
from dgmoe.engine.provenance import pretrained_identity
from dgmoe.report.protocol import _pretrained

#: `args` fields of the identity, shown as the flag that sets them
IDENTITY_ARGS: tuple[tuple[str, str], ...] = (("steps", "--steps"), ("n_per_domain", "--n-per-domain"),
                                              ("holdout_fraction", "--holdout-fraction"))
#: how an unrecorded (None) value reads: the catalogue's schedule, every image; any other, its flag's default
UNSET: dict[str, str] = {"steps": "default", "n_per_domain": "all"}
DEFAULTS: dict[str, Any] = RunConfig().flat()
Identity = tuple[tuple[str, str], ...]  # (flag, value as shown)


def _value(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    return str(value) if value is not None else UNSET.get(key) or str(DEFAULTS.get(key))


def run_identity(args: dict[str, Any], config: dict[str, Any] | None) -> Identity:
    """(flag, value) of every fact of a run's identity: its schedule and data size, the image weights it started
    from (`config.json`'s record, else the file as it is now; `none` from scratch; with how their position
    embedding was resampled) and the text tower's file."""
    facts = [(flag, _value(args, key)) for key, flag in IDENTITY_ARGS]
    image = _pretrained(args, config)
    image = "none" if image.startswith("none") else image + (
        " --no-pretrained-antialias" if args.get("pretrained_antialias") is False else "")
    facts.append(("--pretrained", image))
    text = args.get("text_pretrained")
    facts.append(("--text-pretrained", (pretrained_identity(str(text)) or "none") if text else "none"))
    return tuple(facts)


def distinguishing(items: Sequence[tuple[Hashable, Identity]]) -> list[str]:
    """For each (row key, identity): "" when every item of its key has one identity, else " [facts]" naming the
    facts that differ within the key, e.g. " [--steps 0]"."""
    by_key: dict[Hashable, set[Identity]] = defaultdict(set)
    for key, identity in items:
        by_key[key].add(identity)
    out = []
    for key, identity in items:
        found = by_key[key]
        if len(found) == 1:
            out.append("")
            continue
        differ = [i for i, (flag, _) in enumerate(identity) if len({other[i][1] for other in found}) > 1]
        out.append(" [" + ", ".join(f"{identity[i][0]} {identity[i][1]}" for i in differ) + "]")
    return out


def saved_config(run_dir: str) -> dict[str, Any] | None:
    """A run folder's config.json, None where it cannot be read (old or foreign run folders)."""
    try:
        config = json.loads((Path(run_dir) / "config.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return config if isinstance(config, dict) else None


def distinguish_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The records with `model` (and `label`, for labelled runs) extended by the facts that tell apart runs of
    one (dataset, algorithm, model) that computed different things (`distinguishing`); unchanged where none
    do. A run's identity is read from its last record and its config.json."""
    if frame.empty:
        return frame
    last = frame.drop_duplicates("run_dir", keep="last")
    runs = [(str(r.run_dir), (r.dataset, r.algorithm, r.model),
             run_identity(r.record.get("args") or {}, saved_config(str(r.run_dir))))
            for r in last.itertuples(index=False)]
    suffixes = distinguishing([(key, identity) for _, key, identity in runs])
    suffix = {run_dir: s for (run_dir, _, _), s in zip(runs, suffixes) if s}
    if not suffix:
        return frame
    frame = frame.copy()
    extra = frame["run_dir"].map(suffix).fillna("")
    frame["model"] = (frame["model"] + extra).str.strip()
    if "label" in frame.columns:
        labelled = frame["label"].notna() & (frame["label"].astype(str) != "") & (extra != "")
        frame.loc[labelled, "label"] = frame.loc[labelled, "label"].astype(str) + extra[labelled]
    return frame
