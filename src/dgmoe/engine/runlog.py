"""The run's own log: `<run>/train.log`, appended by every session of the run (start, resume, progress,
checkpoints, how it ended), whatever the console shows and however `logging` is configured.

Lines said before the run folder is locked (the announcement, data loading) are held and written once the
folder is this process's; a run refused (locked by another trainer, or holding another run) writes nothing.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable, TextIO

LOG_NAME = "train.log"


class _Capture(logging.Handler):
    """dgmoe's own log records during the run (data loading, checkpoint loading, warnings) into the file."""

    def __init__(self, run_log: "RunLog"):
        super().__init__(logging.INFO)
        self.run_log = run_log

    def emit(self, record: logging.LogRecord) -> None:
        self.run_log.record(record.getMessage() if record.levelno < logging.WARNING
                            else f"{record.levelname.lower()}: {record.getMessage()}")


class RunLog:
    """Console lines and the run's log file. `console=False` keeps the console quiet (`--progress none`)."""

    def __init__(self, console: bool = True, stream: TextIO | None = None):
        self.console = console
        self.stream = stream
        self.write_console: Callable[[str], None] = self._print  # a tqdm bar redirects this while it is shown
        self._pending: list[str] = []
        self._file: TextIO | None = None
        self._capture = _Capture(self)

    def _print(self, line: str) -> None:
        print(line, file=self.stream or sys.stderr, flush=True)

    def say(self, line: str) -> None:
        """A line for the user: on the console (unless quiet) and in the log file."""
        if self.console:
            self.write_console(line)
        self.record(line)

    def record(self, line: str) -> None:
        """A line for the log file only."""
        stamped = f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {line}"
        if self._file is None:
            self._pending.append(stamped)
        else:
            self._file.write(stamped + "\n")
            self._file.flush()

    def __enter__(self) -> "RunLog":
        logging.getLogger("dgmoe").addHandler(self._capture)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("dgmoe").removeHandler(self._capture)
        if self._file is not None:
            self._file.close()
            self._file = None
        self._pending.clear()

    def open(self, run_dir: str | Path) -> None:
        """Start writing `<run_dir>/train.log` (after the run folder is locked): the held lines first."""
        from dgmoe import __version__
        from dgmoe.engine.provenance import source_commit

        path = Path(run_dir) / LOG_NAME
        self._file = open(path, "a", encoding="utf-8")
        commit = source_commit()
        self._file.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} dgmoe {__version__}"
                         f"{f' ({commit})' if commit else ''}, pid {os.getpid()} on {socket.gethostname()}: "
                         f"{' '.join(sys.argv)}\n")
        for line in self._pending:
            self._file.write(line + "\n")
        self._pending.clear()
        self._file.flush()
