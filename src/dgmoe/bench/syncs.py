"""Host synchronisations of whole models' training steps: `dgmoe bench syncs`.

A host synchronisation (a device value read back by the host: `.item()`, a boolean mask's size, a count read to
size a loop) stalls the host until the device has finished everything queued before it, so the host cannot run
ahead of the device and the step pays every kernel launch's host time in full. This counts them per training step
of each model (ERM's step as `dgmoe bench models` times it: the task loss, the sparse layers' auxiliary losses,
backward, Adam), at each precision asked, with `torch.cuda.set_sync_debug_mode("warn")`, which makes torch warn
at every synchronising CUDA operation; a step that warns N times makes N host syncs. The count is taken over
steps that follow a first one (the optimiser's state then exists). `@pytest.mark.gpu` tests hold the same steps
to zero under `set_sync_debug_mode("error")`.

On the CPU there is nothing to count (the host is the device): the rows say so, and the command still runs the
steps, so that its plumbing is tested at tiny sizes on machines without a GPU.
"""
from __future__ import annotations

import warnings
from typing import Iterator

import torch

from dgmoe.bench.config import ModelBenchConfig, SyncBenchConfig
from dgmoe.bench.models import _build, _steps
from dgmoe.devices import fp32_arithmetic

#: the start of the warning torch gives at each synchronising operation in sync debug mode "warn"
SYNC_WARNING = "called a synchronizing CUDA operation"


def _counted(step, steps: int) -> int:
    """The host syncs `steps` calls of `step` make, on CUDA (sync debug mode 'warn', restored after)."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    return sum(SYNC_WARNING in str(w.message) for w in caught)


def host_syncs(name: str, cfg: ModelBenchConfig, steps: int = 2) -> float | None:
    """Host syncs per training step of `name` under `cfg` (its device, precision, compile mode), averaged over
    `steps` steps after a first; None on a device other than CUDA (nothing to count)."""
    torch.manual_seed(0)
    model = _build(name, cfg)
    train_step, _ = _steps(model, cfg)
    with fp32_arithmetic(cfg.precision, cfg.device):
        train_step()  # the optimiser's state and, with --compile, the graphs are built here
        if not cfg.device.startswith("cuda"):
            train_step()
            return None
        torch.cuda.synchronize()
        return _counted(train_step, steps) / steps


def _configs(cfg: SyncBenchConfig) -> Iterator[ModelBenchConfig]:
    for precision in cfg.precisions:
        yield ModelBenchConfig(cfg.models, cfg.img_size, cfg.batch_size, device=cfg.device, precision=precision,
                               compile=cfg.compile)


def bench_syncs(cfg: SyncBenchConfig) -> list[dict]:
    """One row per model and precision: host syncs per training step ('n/a (cpu)' off CUDA)."""
    rows = []
    for one in _configs(cfg):
        for name in cfg.models:
            count = host_syncs(name, one, cfg.steps)
            rows.append({"model": name, "precision": one.precision, "compiled": one.compile,
                         "host syncs per step": f"n/a ({one.device})" if count is None else count})
    return rows

