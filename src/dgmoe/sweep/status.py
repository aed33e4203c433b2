"""`dgmoe sweep status` and `delete-incomplete`: the state of every job of a sweep directory."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from dgmoe.sweep import state
from dgmoe.sweep.jobs import MANIFEST_NAME, iter_job_dirs, read_manifest
from dgmoe.sweep.state import JobState


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    description: str  # "" for a job directory the manifest does not know
    state: JobState
    detail: str = ""  # e.g. the return code of a failed job


def sweep_status(output_dir: str | os.PathLike, unreadable: list[str] | None = None) -> list[JobStatus]:
    """States of the jobs in the sweep's manifest, plus any other job directory found on disk.

    Without a manifest (a sweep launched elsewhere), only job directories on disk are reported, so
    nothing can be NOT_LAUNCHED. A job directory that cannot be read (another user's, under a strict umask)
    is left out and named in `unreadable` (a warning when it is None).
    """
    root = Path(output_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"sweep output dir {root} does not exist")
    jobs = read_manifest(root) if (root / MANIFEST_NAME).is_file() else []
    known = {j.job_id for j in jobs}
    found = [(j.job_id, j.describe(), j.dir) for j in jobs]
    found += [(d.name, "", d) for d in iter_job_dirs(root) if d.name not in known]
    out, blocked = [], []
    for job_id, description, job_dir in found:
        try:
            out.append(_status(job_id, description, job_dir))
        except OSError as err:
            blocked.append(f"{job_dir} ({err.strerror})")
    if unreadable is not None:
        unreadable += blocked
    for folder in blocked if unreadable is None else ():
        warnings.warn(f"cannot read {folder}: its state is unknown", stacklevel=2)
    return out


def _status(job_id: str, description: str, job_dir: Path) -> JobStatus:
    s = state.job_state(job_dir)
    detail = ""
    if s is JobState.FAILED:
        info = state.failure_info(job_dir) or {}
        detail = f"exit {info.get('returncode', '?')}, see {job_dir / 'stderr.log'}"
    return JobStatus(job_id, description, s, detail)


def format_status(statuses: list[JobStatus], verbose: bool = False) -> str:
    counts = state.count_states(s.state for s in statuses)
    lines = [f"{len(statuses)} job(s): " + ", ".join(f"{n} {s.value}" for s, n in counts.items())]
    if verbose:
        for s in sorted(statuses, key=lambda s: (state.STATE_ORDER.index(s.state), s.description)):
            text = s.description or "(not in sweep.json)"
            lines.append(f"{s.state.value:>12}  {s.job_id}  {text}" + (f"  [{s.detail}]" if s.detail else ""))
    return "\n".join(lines)


def unfinished_jobs(output_dir: str | os.PathLike, include_failed: bool = True) -> list[JobStatus]:
    """The jobs `delete_incomplete` would delete now."""
    doomed = state.unfinished_states(include_failed)
    return [s for s in sweep_status(output_dir) if s.state in doomed]


def delete_incomplete(output_dir: str | os.PathLike, include_failed: bool = True,
                      job_ids: Iterable[str] | None = None) -> list[Path]:
    """Delete the directories of INCOMPLETE (and FAILED) jobs, or of those among `job_ids`, so they restart
    from scratch."""
    wanted = None if job_ids is None else set(job_ids)
    dirs = [d for d in iter_job_dirs(output_dir) if wanted is None or d.name in wanted]
    return state.delete_unfinished(dirs, include_failed=include_failed)
