"""What a run folder holds, written by the one process that holds its lock (`dgmoe.engine.lock`).

`RunWriter` owns every file a run writes: config, records, weights, resume state and the `done` marker,
which records how many checkpoints the run has and whether it stopped early, so that `dgmoe results` can
tell a finished run from one whose records were lost; also those of a run made after training (a soup:
`RunWriter.write_evaluated`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn

from dgmoe.engine.checkpoint import save_resume_state, save_weights
from dgmoe.engine.io import read_jsonl, remove_stale_temporaries, write_json_atomic, write_jsonl_atomic
from dgmoe.engine.lock import RunLock
from dgmoe.errors import DiskFullError

DONE_NAME = "done"
WEIGHT_FILES = ("model.safetensors", "best.safetensors")


def read_done(run_dir: str | Path) -> dict[str, Any] | None:
    """The `done` marker's content ({} for DomainBed's plain marker), or None if the run is not finished."""
    path = Path(run_dir) / DONE_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


def expected_steps(n_steps: int, checkpoint_freq: int) -> list[int]:
    """The steps a run evaluates at: every `checkpoint_freq`-th and the last (DomainBed's schedule)."""
    return list(Schedule(n_steps, checkpoint_freq))


@dataclass(frozen=True)
class Schedule:
    """`expected_steps` without listing them: membership and counts in constant time, whatever `n_steps`. A run
    of 0 steps (`--steps 0`) evaluates its initial network once, as step 0, like a run of 1 step."""

    n_steps: int
    checkpoint_freq: int

    @property
    def _steps(self) -> int:
        return max(self.n_steps, 1)

    def __contains__(self, step: object) -> bool:
        return isinstance(step, int) and 0 <= step < self._steps and (
            step % self.checkpoint_freq == 0 or step == self._steps - 1)

    def count_from(self, step: int) -> int:
        """How many checkpoints are at `step` or later."""
        step, n = max(step, 0), self._steps
        if step >= n:
            return 0
        regular = (n - 1) // self.checkpoint_freq - (step - 1) // self.checkpoint_freq if step else \
            (n - 1) // self.checkpoint_freq + 1
        return regular + (0 if (n - 1) % self.checkpoint_freq == 0 else 1)

    def __iter__(self):
        yield from range(0, self._steps, self.checkpoint_freq)
        if (self._steps - 1) % self.checkpoint_freq:
            yield self._steps - 1


def tidy_finished(out: Path, keep_resume: bool) -> list[Path]:
    """In a finished run folder whose lock this process holds: remove temporaries of killed writers, and the
    resume.pt a crash between `done` and its removal left (when neither the run nor this command keeps it)."""
    removed = remove_stale_temporaries(out)
    done = read_done(out)
    resume = out / "resume.pt"
    if done is not None and done.get("keep_resume") is False and not keep_resume and resume.exists():
        resume.unlink()
        removed.append(resume)
    return removed


@dataclass
class RunWriter:
    """Writes one run folder; only the main process of a run writes (`enabled`)."""

    out: Path
    skip_model_save: bool = False
    save_model_every_checkpoint: bool = False
    save_best: bool = True
    keep_resume: bool = False
    enabled: bool = True
    metadata: dict[str, str] = field(default_factory=dict)  # provenance, in every weights file
    lock: RunLock | None = None  # checked before every write (its file deleted: stop)
    last_saved_step: int | None = field(default=None, init=False)

    @property
    def resume_path(self) -> Path:
        return self.out / "resume.pt"

    def start(self, run_config: dict[str, Any], replace: bool = False) -> None:
        """After the lock is taken: remove temporaries of killed writers, write config.json once (again when
        `replace`: a corrected command takes over a folder that holds no record yet)."""
        if not self.enabled:
            return
        remove_stale_temporaries(self.out)
        if replace or not (self.out / "config.json").exists():
            self._write(lambda: write_json_atomic(self.out / "config.json", run_config))

    def extend(self, run_config: dict[str, Any]) -> None:
        """Before `start`, for `--extend`: remove `done`, then give config.json the longer schedule (recording the
        ones it had under "extended_from"), so the run resumes from its last resume state and trains on. In this
        order a kill at any point leaves a folder the same command completes, and never a `done` beside the
        longer schedule."""
        path = self.out / "config.json"
        if not self.enabled or not path.exists():
            return
        old = json.loads(path.read_text())
        if old.get("n_steps") == run_config["n_steps"]:
            return
        before = {"n_steps": old["n_steps"], "checkpoint_freq": old["checkpoint_freq"]}
        history = [*old.get("extended_from", []), before]
        self._write(lambda: (self.out / DONE_NAME).unlink(missing_ok=True))
        kept = {k: old[k] for k in ("initialisation", "head") if k in old}  # what it started from
        self._write(lambda: write_json_atomic(path, {**run_config, **kept, "extended_from": history}))

    def records(self) -> list[dict[str, Any]]:
        return read_jsonl(self.out / "results.jsonl")

    def checkpoint(self, step: int, records: list[dict[str, Any]], network: nn.Module, best: bool,
                   resume_state: dict[str, Any]) -> None:
        """Records first (a crash after them resumes from the previous resume state and rewrites them)."""
        if not self.enabled:
            return
        meta = {**self.metadata, "step": str(step)}
        self._write(lambda: write_jsonl_atomic(self.out / "results.jsonl", records))
        if not self.skip_model_save:
            self._write(lambda: save_weights(network, self.out / "model.safetensors", meta))
            if self.save_best and best:
                self._write(lambda: save_weights(network, self.out / "best.safetensors", meta))
            if self.save_model_every_checkpoint:
                self._write(lambda: save_weights(network, self.out / f"model_step{step}.safetensors", meta))
        self._write(lambda: save_resume_state(self.resume_path, resume_state))
        self.last_saved_step = step

    def rewrite_records(self, records: list[dict[str, Any]]) -> None:
        if self.enabled:
            self._write(lambda: write_jsonl_atomic(self.out / "results.jsonl", records))

    def finish(self, records: list[dict[str, Any]], stopped_early: bool) -> None:
        """Write `done` (with the number of records and the last step) and drop what a finished run
        no longer needs: resume.pt unless `keep_resume`."""
        if not self.enabled:
            return
        info = {"status": "done", "records": len(records), "last_step": records[-1]["step"] if records else None,
                "stopped_early": stopped_early, "keep_resume": self.keep_resume}
        self._write(lambda: write_json_atomic(self.out / DONE_NAME, info))
        if not self.keep_resume:
            self._write(lambda: self.resume_path.unlink(missing_ok=True))

    def write_evaluated(self, run_config: dict[str, Any], records: list[dict[str, Any]],
                        network: nn.Module | None) -> None:
        """The whole folder of a run whose weights were made after training (a weight average, an output
        ensemble: `dgmoe soup`): config.json, its records, `network`'s weights at the last record's step (none
        for an ensemble: `network` None) and `done`; no resume state."""
        self.start(run_config)
        self.rewrite_records(records)
        if network is not None and not self.skip_model_save and self.enabled:
            meta = {**self.metadata, "step": str(records[-1]["step"])}
            self._write(lambda: save_weights(network, self.out / "model.safetensors", meta))
        self.finish(records, stopped_early=False)

    def _write(self, write) -> None:
        if self.lock is not None:
            self.lock.check()
        try:
            write()
        except DiskFullError as e:
            where = (f"re-run the same command to resume from step {self.last_saved_step + 1}"
                     if self.last_saved_step is not None else "re-run the same command to start again")
            raise DiskFullError(e.errno, f"{e.strerror}; free space and {where}") from e
