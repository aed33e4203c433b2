"""Training, evaluation, checkpoints: `train(RunConfig(...))`, or `train(dataset=..., output_dir=...)`, runs
one DomainBed run (loaded on first use)."""
from __future__ import annotations

from typing import Any

__all__ = ["RunConfig", "RunResult", "train"]


def __getattr__(name: str) -> Any:
    if name == "RunConfig":
        from dgmoe.engine.config import RunConfig

        return RunConfig
    if name in ("RunResult", "train"):
        import dgmoe.engine.trainer as module

        return getattr(module, name)
    raise AttributeError(f"module 'dgmoe.engine' has no attribute {name!r}")
