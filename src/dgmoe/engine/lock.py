"""One trainer per run folder: an exclusive `flock` on `<run>/.dgmoe.lock`.

The lock is held for as long as the trainer lives, and the kernel releases it when the process dies,
however it dies. A trainer checks before each write that the file it locked is still the one at that
path (`check`): a lock file deleted or replaced under it stops it before it writes. The file names the
holder (pid, host, since when, command), so a second trainer is refused
with a message a person can act on, and a sweep reads a job's liveness from its trainer (`lock_holder`),
not from the launcher that started it. Imports no torch, so light tools (sweep status) stay fast.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from dgmoe.engine.io import file_mode
from dgmoe.errors import RunLockedError

LOCK_NAME = ".dgmoe.lock"


def _holder_text(info: dict[str, Any]) -> str:
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')} since {info.get('since', '?')}"


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 1 << 16).decode() or "{}")
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def lock_holder(run_dir: str | Path) -> dict[str, Any] | None:
    """The live process holding the run folder's lock (pid, host, since, command), or None."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(fd) or {"pid": "?"}
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class RunLock:
    """Exclusive lock of a run folder (a context manager; see the module docstring)."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunLockedError(f"{self.path.parent} is being trained by {_holder_text(holder)}; wait for it to "
                                 "finish (or stop it) before running it again") from None
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": sys.argv}).encode())
        os.fsync(fd)
        self.fd = fd

    def check(self) -> None:
        """Raise `RunLockedError` if the lock file was deleted or replaced while held: another trainer could then
        lock a new file and write the folder too, so this one must stop before its next write."""
        if self.fd is None:
            return
        held = os.fstat(self.fd)
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev):
            raise RunLockedError(f"{self.path} was deleted or replaced while this trainer held it, so another "
                                 "trainer may be writing the folder: stopped before writing; re-run the same "
                                 "command once no other trainer runs there")

    def release(self) -> None:
        """Unlock; a finished run (its `done` marker written) loses the lock file too, while still locked, so
        finished folders hold only results (a later trainer notices `done` without locking)."""
        if self.fd is not None:
            if (self.path.parent / "done").exists():
                self.path.unlink(missing_ok=True)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
