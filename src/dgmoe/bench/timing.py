"""Interleaved timing: run every candidate once per round, in fresh processes when asked; report medians
and per-round (paired) ratios to a reference."""
from __future__ import annotations

import ctypes
import json
import random
import statistics
import subprocess
import sys
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


def interleaved_times(candidates: dict[str, Callable[[], None]], rounds: int = 7, warmup: int = 2,
                      seed: int = 0) -> dict[str, list[float]]:
    """Seconds of every call of each candidate, measured round-robin in a seeded random order per round
    (so no candidate always runs right after the same one)."""
    names = list(candidates)
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    order = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in order.sample(names, len(names)):
            start = time.perf_counter()
            candidates[name]()
            times[name].append(time.perf_counter() - start)
    return times


def paired_ratios(times: dict[str, list[float]], reference: str) -> dict[str, float]:
    """Median over rounds of each candidate's time divided by the reference's time in the same round.
    The machine drifts over minutes; a ratio taken within one round cancels most of the drift."""
    ref = times[reference]
    return {name: statistics.median(t / r for t, r in zip(ts, ref)) for name, ts in times.items()}


def run_in_fresh_process(module: str, payload: dict) -> dict:
    """Run `python -m module '<payload json>'` and return the JSON object it prints last.

    Repeating a benchmark in fresh processes samples new physical memory placements: on the 2-core CPU
    one process's dense FFN can run 15% slower than the next one's for the whole life of the process, a
    spread that no number of rounds inside one process reveals."""
    proc = subprocess.run([sys.executable, "-m", module, json.dumps(payload)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child `python -m {module}` failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarize_repeats(runs: list[dict[str, dict[str, float]]], key: str) -> dict[str, dict[str, float]]:
    """Per candidate: the median over runs of `key`, and its min and max over runs."""
    return {name: {"median": statistics.median(r[name][key] for r in runs),
                   "min": min(r[name][key] for r in runs), "max": max(r[name][key] for r in runs)}
            for name in runs[0]}
