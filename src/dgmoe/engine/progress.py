"""Live feedback for a loop of known length, in one place: a tqdm bar on a terminal, otherwise (logs, Slurm
files, pipes) a line after the first update and then at least every `every_s` seconds while updates come, so
a long job always shows it is alive. `ConsoleSink` (training runs) and `dgmoe synthetic` use it.
"""
from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Any, Callable, Literal, TextIO

#: seconds between two reads of a bar's lazily computed postfix (`Progress.update(postfix_fn=...)`)
POSTFIX_EVERY_S = 1.0

Mode = Literal["auto", "bar", "lines", "none"]


def duration(seconds: float) -> str:
    """'0:03:12' (hours:minutes:seconds, rounded)."""
    return str(timedelta(seconds=round(seconds)))


def resolve_mode(mode: Mode, stream: TextIO | None = None) -> Mode:
    """'auto' is 'bar' when `stream` (default stderr) is a terminal, 'lines' otherwise."""
    if mode != "auto":
        return mode
    stream = stream or sys.stderr
    return "bar" if getattr(stream, "isatty", lambda: False)() else "lines"


class Progress:
    """Progress over `total` units (`initial` already done).

    `update(n, line, **postfix)` after each unit of work: on a bar it advances and shows `postfix`; in lines
    mode it writes `line()` (default: `default_line()`) after the first update and whenever `every_s` seconds
    of `clock` passed since the last line (`mark()` restarts that wait, e.g. after another line was printed).
    `write(text)` prints a message without breaking the bar. `clock` is injectable (tests use a fake one)."""

    def __init__(self, total: int, *, mode: Mode = "auto", every_s: float = 20.0, initial: int = 0,
                 unit: str = "step", desc: str = "", write: Callable[[str], None] | None = None,
                 clock: Callable[[], float] | None = None, stream: TextIO | None = None):
        self.total, self.done, self.initial = total, initial, initial
        self.mode, self.every_s, self.unit, self.desc = resolve_mode(mode, stream), every_s, unit, desc
        self.stream = stream
        self._write = write or self._print
        self.clock = clock or (lambda: time.monotonic())
        self.started = self.last_line = self.clock()
        self.lines = 0
        self.last_postfix: float | None = None
        self.bar: Any = None
        if self.mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit=unit, desc=desc or None, dynamic_ncols=True,
                            file=stream)

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)

    def write(self, text: str) -> None:
        """A message for the user, above the bar when there is one."""
        if self.bar is not None:
            self.bar.write(text, file=self.stream or sys.stderr)  # tqdm's default would be stdout
        elif self.mode != "none":
            self._write(text)

    def describe(self, desc: str) -> None:
        """What is being worked on now (the bar's prefix; the start of the default line)."""
        self.desc = desc
        if self.bar is not None:
            self.bar.set_description_str(desc, refresh=False)

    def mark(self) -> None:
        """Restart the wait for the next timed line (something was just printed)."""
        self.last_line = self.clock()

    def seconds_left(self) -> float:
        """Time left at the average pace of this session's units so far."""
        done = self.done - self.initial
        return (self.total - self.done) * (self.clock() - self.started) / done if done else float("nan")

    def default_line(self) -> str:
        pct = 100 * self.done / self.total if self.total else 100.0
        left = self.seconds_left()
        eta = duration(left) if left == left else "?"
        units = self.unit + ("es" if self.unit.endswith("s") else "s")
        return (f"{self.desc + ': ' if self.desc else ''}{self.done}/{self.total} {units} ({pct:.0f}%), "
                f"{duration(self.clock() - self.started)} elapsed, eta {eta}")

    def update(self, n: int = 1, line: Callable[[], str] | None = None,
               postfix_fn: Callable[[], dict[str, Any]] | None = None, **postfix: Any) -> None:
        """Count `n` units. Lines mode prints `line()` when a line is due; a bar shows `postfix`, or
        `postfix_fn()` evaluated at most once per `POSTFIX_EVERY_S` (values that are costly to read, such as
        a loss still on the GPU, are read only then)."""
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            now = self.clock()
            if postfix_fn is not None and (self.last_postfix is None or now - self.last_postfix >= POSTFIX_EVERY_S):
                self.last_postfix = now
                postfix = {**postfix, **postfix_fn()}
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
            return
        if self.mode != "lines":
            return
        now = self.clock()
        if self.lines == 0 or (self.every_s and now - self.last_line >= self.every_s):
            self.last_line = now
            self.lines += 1
            self._write(line() if line is not None else self.default_line())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
