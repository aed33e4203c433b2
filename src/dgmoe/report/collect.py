"""Read training records from a runs directory.

A run directory holds `results.jsonl` (one JSON object per checkpoint, DomainBed's keys: `step`,
`env{i}_in_acc`, `env{i}_out_acc`, ..., `hparams`, `args`) and, once finished, a `done` file.
`load_records` turns every record under a root, at any depth, into one row of a DataFrame.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from dgmoe.duplicates import EXPLICIT_HPARAMS, drop_duplicate_runs
from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import FOLDER_SUFFIX
from dgmoe.engine.rundir import expected_steps, read_done
from dgmoe.engine.runtree import walk_run_folders
from dgmoe.errors import UsageError
from dgmoe.report.identity import distinguish_runs

#: `args` fields every record must carry; selection groups on them.
REQUIRED_ARGS: tuple[str, ...] = ("dataset", "algorithm", "test_envs", "hparams_seed", "trial_seed")
#: further `args` fields copied to columns when present (`model` is "" when absent, e.g. DomainBed records;
#: with overrides such as `args.model_kwargs` it becomes `model_label(...)`; `model_name` keeps the bare name;
#: `label` is the run's `--label`, its name in tables; `data_version` the dataset version it trained on).
OPTIONAL_ARGS: tuple[str, ...] = ("model", "seed", "output_dir", "steps", "domains", "label", "data_version")
#: `--peft` and its knobs as `args` carries them, with their defaults: a run that does not train every weight is
#: named with its mode and the knobs it changed (`model_label`)
PEFT_DEFAULTS: dict[str, Any] = {k: v for k, v in RunConfig().flat().items() if k.startswith("peft")}
#: the classifier settings (`--head`, its prompts): a zero-shot or text-initialised head is named in tables
HEAD_DEFAULTS: dict[str, Any] = {k: v for k, v in RunConfig().flat().items() if k in ("head", "prompt_templates")}
#: columns that describe where a record came from rather than what it measured.
SOURCE_COLUMNS: tuple[str, ...] = ("model_name", "run_dir", "file", "line", "done", "n_envs", "record")


class RecordError(UsageError):
    """A results file holds something that is not a usable training record."""


def count_envs(record: dict) -> int:
    """Number of domains in a record: consecutive `env{i}_in_acc` keys from 0 (as DomainBed counts them)."""
    n = 0
    while f"env{n}_in_acc" in record:
        n += 1
    return n


def model_label(name: str, args: dict) -> str:
    """The backbone as tables name it: `args.model` plus the overrides it was built with
    (`args.model_kwargs`, and `args.patch_size` / `args.img_size` when set) and, for a parameter-efficient run,
    its `--peft` mode and the PEFT knobs it changed, and a `--head` other than linear with its prompts, e.g.
    `gmoe_tiny_patch16_224(num_experts=4)` or
    `vit_base_patch16_clip_224(peft='adapter_experts', peft_top_k=2)`, so that ablations of one backbone stay
    apart."""
    overrides = dict(args.get("model_kwargs") or {})
    overrides.update({k: args[k] for k in ("patch_size", "img_size") if args.get(k) is not None})
    if args.get("peft", PEFT_DEFAULTS["peft"]) != PEFT_DEFAULTS["peft"]:
        overrides.update({k: v for k, v in args.items()
                          if k in PEFT_DEFAULTS and (k == "peft" or v != PEFT_DEFAULTS[k])})
    if args.get("head", HEAD_DEFAULTS["head"]) != HEAD_DEFAULTS["head"]:
        overrides.update({k: args[k] for k in HEAD_DEFAULTS if k in args})
    if not overrides:
        return name
    return f"{name}({', '.join(f'{k}={overrides[k]!r}' for k in sorted(overrides))})"


def explicit_hparams(given: Any) -> str:
    """The hparams a run was given explicitly (`args.hparams`: dgmoe's object, DomainBed's JSON text) as
    canonical JSON, "" for none: part of a run's identity in the duplicate rule and in selection."""
    if isinstance(given, str):
        try:
            given = json.loads(given) if given.strip() else None
        except json.JSONDecodeError:
            return given.strip()
    return json.dumps(given, sort_keys=True) if given else ""


def _parse_lines(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for each record; a broken *last* line (crash mid-append) is skipped with a warning."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    out: list[tuple[int, dict]] = []
    for k, (lineno, line) in enumerate(numbered):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            if k == len(numbered) - 1:
                warnings.warn(
                    f"{path}:{lineno}: skipping an unreadable trailing line (a partial write?): {err}",
                    stacklevel=3,
                )
                continue
            raise RecordError(
                f"{path}:{lineno}: not valid JSON ({err}); only the last line of a results file may be "
                "partial, so this file is corrupted: remove or repair that line"
            ) from None
        if not isinstance(obj, dict):
            raise RecordError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        out.append((lineno, obj))
    return out


def read_records(path: str | os.PathLike, check: bool = False) -> list[tuple[int, dict]]:
    """(line number, record) for every record of a `results.jsonl`; a partial last line is skipped with a
    warning, any other unreadable line (with `check`: any record `load_records` would refuse) raises
    `RecordError` naming the file and line."""
    path = Path(path)
    records = _parse_lines(path)
    if check:
        for lineno, record in records:
            _row(record, path, lineno)
    return records


def _row(record: dict, path: Path, lineno: int) -> dict:
    where = f"{path}:{lineno}"
    args = record.get("args")
    if not isinstance(args, dict):
        raise RecordError(f"{where}: record has no 'args' object (keys: {sorted(record)[:12]})")
    missing = [k for k in REQUIRED_ARGS if k not in args]
    if missing:
        raise RecordError(f"{where}: args lack {missing}; every record needs args {list(REQUIRED_ARGS)}")
    if "step" not in record:
        raise RecordError(f"{where}: record has no 'step'")
    for key in ("hparams_seed", "trial_seed"):
        if not isinstance(args[key], int) or isinstance(args[key], bool):
            raise RecordError(f"{where}: args.{key} must be an int, got {args[key]!r}")
    for key in ("dataset", "algorithm"):
        if not isinstance(args[key], str) or not args[key]:
            raise RecordError(f"{where}: args.{key} must be a non-empty string, got {args[key]!r}")
    test_envs = args["test_envs"]
    if not isinstance(test_envs, (list, tuple)) or not all(isinstance(e, int) for e in test_envs):
        raise RecordError(f"{where}: args.test_envs must be a list of ints, got {test_envs!r}")
    n_envs = count_envs(record)
    if any(not 0 <= e < n_envs for e in test_envs):
        raise RecordError(f"{where}: args.test_envs={list(test_envs)} but the record has {n_envs} domains")
    row = {k: v for k, v in record.items() if k not in ("args", "hparams") and not isinstance(v, (dict, list))}
    for key in REQUIRED_ARGS + OPTIONAL_ARGS:
        row[key] = args.get(key)
    if args.get("label") is not None and not isinstance(args["label"], str):
        raise RecordError(f"{where}: args.label must be a string, got {args['label']!r}")
    if args.get("model_kwargs") is not None and not isinstance(args["model_kwargs"], dict):
        raise RecordError(f"{where}: args.model_kwargs must be an object, got {args['model_kwargs']!r}")
    row[EXPLICIT_HPARAMS] = explicit_hparams(args.get("hparams"))
    row["model_name"] = row["model"] or ""
    row["model"] = model_label(row["model_name"], args)
    row["test_envs"] = tuple(test_envs)
    domains = args.get("domains")
    row["domains"] = tuple(str(d) for d in domains) if domains else None
    if row["domains"] is not None and len(row["domains"]) != n_envs:
        raise RecordError(f"{where}: args.domains has {len(row['domains'])} names for {n_envs} domains")
    row.update(run_dir=str(path.parent), file=str(path), line=lineno, n_envs=n_envs, record=record)
    return row


def check_complete(run_dir: Path, records: list[dict], done: dict) -> None:
    """Refuse a finished run whose records do not cover its schedule: every checkpoint step of
    `args.steps`/`args.checkpoint_freq`, up to the last one or to where it stopped early (its `done` says so).
    A gap means records were lost (e.g. two trainers wrote one folder); its numbers cannot be trusted."""
    # (steps, freq) in record order: one, or more for a run extended with --extend
    schedules: list[tuple[Any, Any]] = []
    for record in records:
        args = record.get("args", {})
        schedule = (args.get("steps"), args.get("checkpoint_freq"))
        if not schedules or schedules[-1] != schedule:
            schedules.append(schedule)
    if not schedules or not all(isinstance(s, int) and isinstance(f, int) and f >= 1 for s, f in schedules):
        return  # DomainBed's records may leave the schedule at its dataset default (None)
    expected: list[int] = []
    for steps, freq in schedules:  # an extension continues after the last step of the schedule before it
        expected += [s for s in expected_steps(steps, freq) if not expected or s > expected[-1]]
    steps, freq = schedules[-1]
    found = [r.get("step") for r in records]
    stopped_early = bool(done.get("stopped_early")) and found and done.get("last_step") == found[-1]
    if found == expected or (stopped_early and found == expected[:len(found)]):
        return
    missing = sorted(set(expected[: (len(found) if stopped_early else len(expected))]) - set(found))
    raise RecordError(
        f"{run_dir} is marked done but its records do not cover its schedule ({steps} steps, a checkpoint every "
        f"{freq}): missing steps {missing[:8]}{' ...' if len(missing) > 8 else ''}, found {found[:8]}"
        f"{' ...' if len(found) > 8 else ''}. Its records were lost or mixed up: delete its 'done' file and re-run "
        "the run's command to resume it, or move the folder out of the results root")


class DuplicateRunsWarning(UserWarning):
    """One run configuration found in several run dirs (e.g. a recipe's smoke scale trains the same stand-in in
    several parts): the records keep the first dir of each."""


def find_results_files(root: str | os.PathLike, unreadable: list[str] | None = None,
                       links: list[str] | None = None) -> list[Path]:
    """Every `results.jsonl` under `root` (any depth, through symbolic links to folders: each folder once,
    `dgmoe.engine.runtree`), in sorted order. Folders that cannot be listed (another user's runs made under a
    strict umask) are appended to `unreadable`, links that are not followed (a loop, a second link to one folder,
    a link to nothing) to `links`, or warned about when the list is None."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"runs directory {root} does not exist or is not a directory")
    tree = walk_run_folders(root, "results.jsonl",
                            skip=lambda d: d.startswith(".") and d.endswith(FOLDER_SUFFIX))  # being written
    if links is not None:
        links += tree.links
    else:
        for link in tree.links:
            warnings.warn(f"not followed: {link}", stacklevel=3)
    if unreadable is not None:
        unreadable += tree.unreadable_named()
    else:
        _warn_unreadable(tree.unreadable_named())
    return [folder / "results.jsonl" for folder in tree.found]


def _warn_unreadable(folders: list[str]) -> None:
    for folder in folders:
        warnings.warn(f"cannot read {folder}: its runs are left out", stacklevel=3)


def load_records(root: str | os.PathLike, include_unfinished: bool = False,
                 skip_broken: bool = False) -> pd.DataFrame:
    """Load every record under `root` into a DataFrame, one row per checkpoint.

    Columns: the record's scalar keys (`step`, `loss`, `env{i}_in_acc`, ...), the `args` fields
    (`dataset`, `algorithm`, `model`, `test_envs` as a tuple, `hparams_seed`, `trial_seed`, `seed`,
    `output_dir`, `steps`, `domains` as a tuple or None), `explicit_hparams` (the given `--hparams`, see
    `explicit_hparams`) and `run_dir`, `file`, `line`, `done`, `n_envs` and `record` (the raw dict).

    Runs of one (dataset, algorithm, model) that computed different things (other steps, data size or weights:
    `dgmoe.report.identity`) have the facts that differ appended to `model` (and `label`), so that they are rows
    of their own. A run configuration found in several run dirs keeps its first dir, with a
    `DuplicateRunsWarning` naming the others (`dgmoe.duplicates.drop_duplicate_runs`). Runs without a `done`
    file are still training (or crashed): their last checkpoint is not the final one, so they are left out, with
    a warning, unless `include_unfinished`. A file with a record that cannot be used raises `RecordError`; with
    `skip_broken` (the HTML report, which lists such runs) the whole file is left out with a warning instead.
    """
    rows: list[dict] = []
    unfinished: list[str] = []
    unreadable: list[str] = []
    for path in find_results_files(root, unreadable):
        try:
            done = read_done(path.parent)
        except OSError as err:
            unreadable.append(f"{path.parent} ({err.strerror})")
            continue
        if done is None and not include_unfinished:
            unfinished.append(str(path.parent))
            continue
        try:
            parsed = _parse_lines(path)
            if done is not None:
                check_complete(path.parent, [r for _, r in parsed], done)
            rows += [{**_row(record, path, lineno), "done": done is not None} for lineno, record in parsed]
        except OSError as err:
            unreadable.append(f"{path} ({err.strerror})")
        except RecordError as err:
            if not skip_broken:
                raise
            warnings.warn(f"left out {path}: {err}", stacklevel=2)
    _warn_unreadable(unreadable)
    if unfinished:
        shown = ", ".join(unfinished[:3]) + (", ..." if len(unfinished) > 3 else "")
        warnings.warn(
            f"skipped {len(unfinished)} unfinished run dir(s) without a 'done' file ({shown}); "
            "pass include_unfinished=True (CLI: --include-unfinished) to use them",
            stacklevel=2,
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=["step", *REQUIRED_ARGS, *OPTIONAL_ARGS, EXPLICIT_HPARAMS, *SOURCE_COLUMNS])
    frame = frame.sort_values(["file", "step", "line"], kind="stable").reset_index(drop=True)
    frame = distinguish_runs(frame)  # runs that computed different things are rows of their own
    frame, duplicates = drop_duplicate_runs(frame)
    if duplicates:
        warnings.warn(duplicates, DuplicateRunsWarning, stacklevel=2)
    return frame
