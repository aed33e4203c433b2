"""Interleaved timing: run every candidate once per round, in fresh processes when asked; report medians
and per-round (paired) ratios to a reference, with their spread, and say when a number should not be trusted.

A benchmark refuses to mislead:

- every candidate runs `warmup` (>= `MIN_WARMUP`) untimed rounds first and is timed over at least
  `MIN_ROUNDS` rounds (`check_rounds`);
- every ratio is printed with its spread over rounds, the interquartile range of the per-round ratios
  (`Spread.text`, e.g. `1.07-1.10`);
- `timing_warnings` flags a ratio whose rounds disagree (IQR wider than `MAX_SPREAD` of the median), whose
  ratio of median seconds disagrees with its median per-round ratio, a call too short to time
  (`MIN_SECONDS`), and a problem too small to time reliably (`MIN_FLOPS` per call of the reference, known
  from the problem's shape, so this warning does not depend on the machine's speed).
"""
from __future__ import annotations

import ctypes
import json
import math
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

#: timed rounds every benchmark needs at least (a median and quartiles of fewer say little).
MIN_ROUNDS = 5
#: untimed rounds before timing (first calls allocate, page in code and fill caches).
MIN_WARMUP = 1
#: a ratio whose per-round IQR exceeds this fraction of its median is flagged.
MAX_SPREAD = 0.10
#: ratio of median seconds vs median per-round ratio: more apart than this factor is flagged.
MAX_DISAGREEMENT = 1.10
#: a call shorter than this is mostly timer, Python and dispatch overhead.
MIN_SECONDS = 0.005
#: a reference doing fewer floating-point operations per call is too small a problem to time reliably.
MIN_FLOPS = 1e9


def check_rounds(rounds: int, warmup: int = MIN_WARMUP) -> None:
    """Refuse too few timed rounds or no warm-up: the result would be a number without a spread."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"need at least {MIN_ROUNDS} timed rounds for a median and its spread, got {rounds}")
    if warmup < MIN_WARMUP:
        raise ValueError(f"need at least {MIN_WARMUP} untimed warm-up round(s), got {warmup}")


@dataclass(frozen=True)
class Spread:
    """Median and spread of a sample: quartiles (linear interpolation, as numpy) and extremes."""

    median: float
    q1: float
    q3: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> "Spread":
        xs = sorted(float(v) for v in values)
        if not xs:
            raise ValueError("no values")

        def quantile(q: float) -> float:
            pos = q * (len(xs) - 1)
            lo = math.floor(pos)
            return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)

        return cls(statistics.median(xs), quantile(0.25), quantile(0.75), xs[0], xs[-1], len(xs))

    @property
    def relative(self) -> float:
        """IQR / |median| (0 for a constant sample)."""
        if self.median == 0:
            return 0.0 if self.q3 == self.q1 else math.inf
        return (self.q3 - self.q1) / abs(self.median)

    def text(self, fmt: str = ".3f") -> str:
        """`1.071-1.103`: the interquartile range, as printed next to a ratio."""
        return f"{self.q1:{fmt}}-{self.q3:{fmt}}"


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
                      seed: int = 0, calls: int = 1, sync: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each candidate, measured round-robin in a seeded random order per round (so no
    candidate always runs right after the same one), after `warmup` untimed rounds.

    A round of a candidate is `calls` back-to-back calls, then one `sync()` (e.g. `torch.cuda.synchronize`),
    timed together and divided by `calls`: on a GPU a path without host synchronisations then overlaps its
    Python with the device's work as it does in training, where a sync after every call would charge it
    the launch latency it hides (`calls_per_round` picks the count per device)."""
    check_rounds(rounds, warmup)
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    done = sync or (lambda: None)
    names = list(candidates)
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
        done()
    order = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in order.sample(names, len(names)):
            fn = candidates[name]
            done()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            done()
            times[name].append((time.perf_counter() - start) / calls)
    return times


def device_sync(device: str) -> Callable[[], None]:
    """What waits for `device`'s queued work: `torch.cuda.synchronize` on CUDA, nothing on the CPU."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None


def calls_per_round(device: str) -> int:
    """Back-to-back calls timed together: 10 on an accelerator (host and device overlap as in training),
    1 on the CPU (which executes each call as it is made)."""
    return 1 if device.split(":")[0] == "cpu" else 10


def round_ratios(times: Mapping[str, Sequence[float]], reference: str) -> dict[str, list[float]]:
    """Each candidate's time divided by the reference's time in the same round, round by round."""
    ref = times[reference]
    return {name: [t / r for t, r in zip(ts, ref)] for name, ts in times.items()}


def timing_warnings(label: str, ratios: Sequence[float], seconds: Sequence[float] = (),
                    reference_seconds: Sequence[float] = (), calls: int = 1) -> list[str]:
    """Why the ratio of `label` (its per-round `ratios`; its and the reference's per-call `seconds`, timed
    `calls` back-to-back calls per round) should not be trusted, if it should not: rounds that disagree,
    medians that disagree, rounds too short to time."""
    out = []
    spread = Spread.of(ratios)
    if spread.relative > MAX_SPREAD:
        out.append(f"{label}: the ratio varies between rounds (IQR {spread.text()}, {100 * spread.relative:.0f}% "
                   f"of its median {spread.median:.3f}; min-max {spread.low:.3f}-{spread.high:.3f}): the machine "
                   "is busy or the problem too small; do not read differences below that spread")
    if seconds and reference_seconds:
        of_medians = statistics.median(seconds) / statistics.median(reference_seconds)
        if max(of_medians, spread.median) > MAX_DISAGREEMENT * min(of_medians, spread.median):
            out.append(f"{label}: the median per-round ratio ({spread.median:.3f}) and the ratio of median seconds "
                       f"({of_medians:.3f}) disagree: the timings are unstable, the ratio is not a measurement")
    shortest = min((statistics.median(s) for s in (seconds, reference_seconds) if s), default=None)
    if shortest is not None and shortest * calls < MIN_SECONDS:
        timed = "a call takes" if calls == 1 else f"a round of {calls} calls takes"
        out.append(f"{label}: {timed} {1e3 * shortest * calls:.2f} ms (< {1e3 * MIN_SECONDS:.0f} ms), mostly "
                   "timer, Python and dispatch overhead: time a larger problem")
    return out


def size_warning(what: str, flops: float) -> list[str]:
    """A warning when `what` does fewer than `MIN_FLOPS` floating-point operations per call (from the
    problem's shape: printed whatever the timings are)."""
    if flops >= MIN_FLOPS:
        return []
    return [f"{what} does {flops / 1e9:.3g} GFLOP per call (< {MIN_FLOPS / 1e9:.0f} GFLOP): too small a problem "
            "to time reliably, per-call overheads dominate and ratios do not describe the computation"]


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


def summarize_repeats(runs: list[dict[str, dict]], key: str) -> dict[str, dict[str, float]]:
    """Per candidate: the median over runs of `key`, and its min and max over runs."""
    return {name: {"median": statistics.median(r[name][key] for r in runs),
                   "min": min(r[name][key] for r in runs), "max": max(r[name][key] for r in runs)}
            for name in runs[0]}
