"""The resume state of a run: everything that makes a killed run continue exactly where it left off
(weights, optimiser and algorithm state, torch and numpy RNG, records so far, best validation)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dgmoe.engine.checkpoint import load_resume_state
from dgmoe.seeding import numpy_rng_state, set_numpy_rng_state


@dataclass
class Progress:
    """Where a run stands: the next step to train, the records so far and the best training-domain
    validation accuracy seen (the `best.safetensors` criterion)."""

    next_step: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    best_val: float = -1.0


def capture(step: int, algorithm, progress: Progress) -> dict[str, Any]:
    """The resume state after `step` (tensors and plain types only: loaded with `weights_only=True`)."""
    return {"step": step, "algorithm": algorithm.state_dict(), "records": progress.records,
            "best_val": progress.best_val,
            "optimizers": {k: o.state_dict() for k, o in dict(algorithm.optimizers()).items()},
            "extra": algorithm.extra_state(), "rng": torch.get_rng_state(), "numpy_rng": numpy_rng_state()}


def restore(path: Path, algorithm) -> Progress:
    """Load a resume state into `algorithm` and the RNGs; return where the run stands."""
    state = load_resume_state(path)
    algorithm.load_state_dict(state["algorithm"])
    for name, opt in dict(algorithm.optimizers()).items():
        opt.load_state_dict(state["optimizers"][name])
    algorithm.load_extra_state(state.get("extra", {}))
    torch.set_rng_state(state["rng"])
    if "numpy_rng" in state:  # runs saved before dgmoe drew from numpy have none
        set_numpy_rng_state(state["numpy_rng"])
    return Progress(state["step"] + 1, list(state["records"]), state["best_val"])
