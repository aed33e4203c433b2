"""Job states of a sweep, read from marker files in each job directory.

DomainBed knows DONE (a `done` file), INCOMPLETE (the directory exists) and NOT_LAUNCHED. dgmoe adds
what a launcher records, so a sweep can be watched and relaunched safely:

- the trainer's own lock (`dgmoe.engine.lock.RunLock`, an flock the kernel releases when the trainer dies):
  while it is held the job is RUNNING, whatever happened to the launcher or runner that started it (a
  trainer whose launcher was killed keeps running, and a relaunch does not start a second one).
- `running.json`: written by the job runner (host, pid) and touched every `HEARTBEAT_S` seconds while the
  training process lives (the window before the trainer takes its lock, and file systems without
  flock). It counts only while fresh: its mtime is younger than `STALE_AFTER_S` and, on the host that wrote
  it, its pid still exists. A SIGKILLed runner therefore turns INCOMPLETE unless its trainer lives on.
- `failed.json`: the training command exited non-zero (return code, host, time).
- `submitted.json`: a launcher queued the job (Slurm job id or the local launcher's pid); it is
  removed when the job starts. A local launcher's marker counts only while that launcher lives.

Precedence: DONE > RUNNING > FAILED > QUEUED > INCOMPLETE > NOT_LAUNCHED.
"""
from __future__ import annotations

import enum
import json
import os
import shutil
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from dgmoe.atomic import write_text_atomic
from dgmoe.engine.lock import lock_holder

DONE_NAME = "done"
RUNNING_NAME = "running.json"
FAILED_NAME = "failed.json"
SUBMITTED_NAME = "submitted.json"
HEARTBEAT_S = 30.0
STALE_AFTER_S = 150.0


class JobState(str, enum.Enum):
    DONE = "done"
    RUNNING = "running"
    FAILED = "failed"
    QUEUED = "queued"
    INCOMPLETE = "incomplete"
    NOT_LAUNCHED = "not launched"


STATE_ORDER: tuple[JobState, ...] = tuple(JobState)


def job_state(job_dir: str | os.PathLike, stale_after: float = STALE_AFTER_S) -> JobState:
    d = Path(job_dir)
    if not d.is_dir():
        return JobState.NOT_LAUNCHED
    if (d / DONE_NAME).exists():
        return JobState.DONE
    if lock_holder(d) is not None or heartbeat_is_fresh(d, stale_after):
        return JobState.RUNNING
    if (d / FAILED_NAME).exists():
        return JobState.FAILED
    if _submission_is_live(d):
        return JobState.QUEUED
    return JobState.INCOMPLETE


def count_states(states: Iterable[JobState]) -> dict[JobState, int]:
    """Counts of every state, zeros included, in `STATE_ORDER`."""
    counts = Counter(states)
    return {s: counts.get(s, 0) for s in STATE_ORDER}


# --- markers -------------------------------------------------------------------------------------------

def _this_host() -> str:
    return socket.gethostname()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # missing, or caught half-written by another process
    return data if isinstance(data, dict) else None


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    write_text_atomic(path, json.dumps(dict(data), sort_keys=True))


def _same_host_dead(info: Mapping[str, Any] | None) -> bool:
    """True when `info` names a process on this host that no longer exists."""
    if not info or info.get("host") != _this_host() or not isinstance(info.get("pid"), int):
        return False
    return not _pid_alive(info["pid"])


def heartbeat_is_fresh(job_dir: Path, stale_after: float = STALE_AFTER_S) -> bool:
    path = job_dir / RUNNING_NAME
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if age > stale_after:
        return False
    return not _same_host_dead(_read_json(path))


def acquire_running(job_dir: Path, info: Mapping[str, Any], stale_after: float = STALE_AFTER_S) -> bool:
    """Claim a job for this process by creating `running.json`; False when a live runner holds it.

    A stale marker (old heartbeat, or a dead pid on this host) is taken over.
    """
    path = job_dir / RUNNING_NAME
    payload = json.dumps(dict(info), sort_keys=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        if heartbeat_is_fresh(job_dir, stale_after):
            return False
        _write_json_atomic(path, info)
        return True
    with os.fdopen(fd, "w") as f:
        f.write(payload)
    return True


def record_child(job_dir: Path, child_pid: int) -> None:
    """Add the training process's pid to `running.json` (to find or signal it by hand)."""
    info = _read_json(job_dir / RUNNING_NAME)
    if info is not None:
        _write_json_atomic(job_dir / RUNNING_NAME, {**info, "child_pid": child_pid})


def running_info(job_dir: Path) -> dict[str, Any] | None:
    return _read_json(job_dir / RUNNING_NAME)


def touch_heartbeat(job_dir: Path) -> None:
    try:
        os.utime(job_dir / RUNNING_NAME)
    except FileNotFoundError:
        pass


def release_running(job_dir: Path) -> None:
    (job_dir / RUNNING_NAME).unlink(missing_ok=True)


def runner_info(launcher: str) -> dict[str, Any]:
    """Who runs or queues a job: host, pid and launcher, plus the Slurm job id when there is one."""
    info: dict[str, Any] = {"host": _this_host(), "pid": os.getpid(), "launcher": launcher,
                            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if "SLURM_JOB_ID" in os.environ:
        info["slurm_job_id"] = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ["SLURM_JOB_ID"])
        info["slurm_array_task_id"] = os.environ.get("SLURM_ARRAY_TASK_ID")
    return info


def mark_failed(job_dir: Path, returncode: int, command: list[str]) -> None:
    _write_json_atomic(job_dir / FAILED_NAME, {
        "returncode": returncode, "host": _this_host(), "command": command,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S")})


def clear_failed(job_dir: Path) -> None:
    (job_dir / FAILED_NAME).unlink(missing_ok=True)


def failure_info(job_dir: Path) -> dict[str, Any] | None:
    return _read_json(job_dir / FAILED_NAME)


def mark_submitted(job_dir: Path, launcher: str, scheduler_job_id: str | None = None,
                   local: bool = False) -> None:
    """Record that a launcher queued the job; `local=True` ties the marker to this process's life."""
    job_dir.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"launcher": launcher, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if scheduler_job_id is not None:
        info["scheduler_job_id"] = scheduler_job_id
    if local:
        info.update(host=_this_host(), pid=os.getpid())
    _write_json_atomic(job_dir / SUBMITTED_NAME, info)


def clear_submitted(job_dir: Path) -> None:
    (job_dir / SUBMITTED_NAME).unlink(missing_ok=True)


def _submission_is_live(job_dir: Path) -> bool:
    path = job_dir / SUBMITTED_NAME
    if not path.exists():
        return False
    return not _same_host_dead(_read_json(path))


def unfinished_states(include_failed: bool = True) -> set[JobState]:
    """The states `delete-incomplete` deletes: INCOMPLETE, and FAILED unless kept."""
    return {JobState.INCOMPLETE} | ({JobState.FAILED} if include_failed else set())


def delete_unfinished(job_dirs: Iterable[Path], include_failed: bool = True) -> list[Path]:
    """Delete INCOMPLETE (and FAILED) job directories, each state read just before; running, queued and done
    ones are kept."""
    deleted = []
    for d in job_dirs:
        if job_state(d) in unfinished_states(include_failed):
            shutil.rmtree(d)
            deleted.append(d)
    return deleted
