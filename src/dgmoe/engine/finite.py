"""Stopping a diverged run: the first training step whose loss terms were NaN or infinite, kept on the device.

`FiniteWatch.observe(step, metrics)` runs after every training step and never waits for the device: for loss
terms held in tensors it updates, with device operations only, the first step at which each term was not
finite; for terms already on the host (Python floats) it does the same in Python. `check()` reads that back,
once, at the points where the trainer reads the device anyway (a checkpoint, before its record is written),
and raises `NonFiniteLossError` naming the first non-finite step and the terms that were non-finite there.
With `--on-nonfinite-loss continue` the trainer goes on as DomainBed does and only says so once.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from dgmoe.errors import NonFiniteLossError


class FiniteWatch:
    """The first non-finite step of every loss term seen so far (-1: always finite)."""

    def __init__(self) -> None:
        self._host: dict[str, int] = {}  # term -> first non-finite step, for terms given as floats
        self._device: dict[tuple[str, ...], torch.Tensor] = {}  # term names -> first step per term (int64)
        self.reported = False

    def observe(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Note the terms of `metrics` that are not finite at `step` (no host-device synchronisation)."""
        tensors = {k: v for k, v in metrics.items() if isinstance(v, torch.Tensor)}
        for k, v in metrics.items():
            if k not in tensors and k not in self._host and isinstance(v, (int, float)) and not math.isfinite(v):
                self._host[k] = step
        if not tensors:
            return
        names = tuple(tensors)
        values = torch.stack([v.detach().float().sum() for v in tensors.values()])  # (a sum is finite iff all are)
        first = self._device.get(names)
        if first is None:
            first = self._device[names] = torch.full((len(names),), -1, dtype=torch.int64, device=values.device)
        first.masked_fill_(~torch.isfinite(values) & (first < 0), step)

    def first_nonfinite(self) -> tuple[int, list[str]] | None:
        """(first non-finite step, the terms non-finite at it), or None; reads the device back."""
        firsts = dict(self._host)
        for names, steps in self._device.items():
            for name, step in zip(names, steps.tolist()):
                if step >= 0:
                    firsts[name] = min(step, firsts.get(name, step))
        if not firsts:
            return None
        step = min(firsts.values())
        return step, sorted(k for k, s in firsts.items() if s == step)

    def check(self, where: str, stop: bool = True) -> str | None:
        """Raise `NonFiniteLossError` if any term was non-finite (`stop`); else return a warning line, once."""
        found = self.first_nonfinite()
        if found is None or (not stop and self.reported):
            return None
        step, terms = found
        what = f"the training loss became non-finite at step {step} ({', '.join(terms)} NaN or infinite)"
        if stop:
            raise NonFiniteLossError(f"{where}: {what}; stopped before recording it (records up to the last "
                                     "checkpoint are kept, the run is not marked done): lower the learning rate, "
                                     "or pass --on-nonfinite-loss continue to train on as DomainBed does")
        self.reported = True
        return f"warning: {what}; training continues (--on-nonfinite-loss continue)"
