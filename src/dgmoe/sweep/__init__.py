"""DomainBed sweeps: the job grid, launchers (local pool, Slurm via submitit), job states, cost estimates.

The names below are loaded on first use, so that a light tool (job states) does not import torch."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"estimate_study": "estimate", "Job": "jobs", "SweepConfig": "jobs", "build_jobs": "jobs",
          "check_sweep": "jobs", "LAUNCHERS": "launchers", "LaunchConfig": "launchers", "launch_sweep": "launchers",
          "JobState": "state", "job_state": "state", "delete_incomplete": "status", "sweep_status": "status"}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"dgmoe.sweep.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'dgmoe.sweep' has no attribute {name!r}")
