"""Errors a person can act on. The command line prints them in one line, `dgmoe: error: <message>`, with no
traceback (`--debug` or `DGMOE_DEBUG=1` shows it), and exits with the error's `exit_code`.

- `UsageError` (exit 2): the input is wrong: a flag's value, a name, a file, a config, a data folder. The
  message names the flag or file and says what was expected. Raised before anything is written.
- `RunLockedError` (exit 75, "try again later"): another process is training the same run folder.
- `DiskFullError` (exit 1): the disk filled up while writing a file; the run resumes once space is freed.
- `Interrupted` (exit 130): SIGINT or SIGTERM; the message says how to resume.
- `NonFiniteLossError` (exit 3): a training loss became NaN or infinite; no record of it was written.
Any other exception is a failure of dgmoe or of the machine (exit 1), reported in one line too.
"""
from __future__ import annotations


class DgmoeError(Exception):
    """Base of the errors the command line reports without a traceback."""

    exit_code = 1


class UsageError(DgmoeError, ValueError):
    """Wrong input: the message names the flag, name or file and what was expected."""

    exit_code = 2


class RunLockedError(DgmoeError):
    """The run folder is locked by a live trainer (the message names it: pid, host, since when)."""

    exit_code = 75


class DiskFullError(DgmoeError, OSError):
    """No space left while writing a file (the message names it and how to resume)."""


class NonFiniteLossError(DgmoeError):
    """Training diverged: a loss term was not finite (the message names the first such step and the terms)."""

    exit_code = 3


class Interrupted(DgmoeError):
    """The run was stopped by a signal; what was checkpointed is kept."""

    exit_code = 130


class DataMismatchError(DgmoeError):
    """A data check found the folder doubtful: no known version, another dataset's domains, missing or empty
    domains (the message names what differs); exit 1, so that a script can gate on `dgmoe data check`."""
