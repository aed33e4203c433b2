"""Interleaved timing: run every candidate once per round, report medians and ratios to a reference."""
from __future__ import annotations

import ctypes
import statistics
import time
from typing import Callable


def tune_malloc() -> bool:
    """Stop glibc from returning big buffers to the OS after every step (they are page-faulted back on
    the next step). Called by benchmark and training entry points, never at import. False off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    ok = libc.mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1
    return ok and libc.mallopt(M_TRIM_THRESHOLD, 1 << 31) == 1


def interleaved_medians(candidates: dict[str, Callable[[], None]], rounds: int = 7, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each candidate, measured round-robin."""
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}
