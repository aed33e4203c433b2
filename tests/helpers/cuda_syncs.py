"""The GPU tests' check that a whole training step makes no host synchronisation (CUDA's sync debug mode)."""
from __future__ import annotations

from typing import Any

import torch


def step_makes_no_sync(name: str, precision: str, model_kwargs: dict[str, Any] | None = None) -> None:
    """One warm-up training step of model `name` as `dgmoe bench models` builds it (224 px, batch 8, CUDA), then one
    under `torch.cuda.set_sync_debug_mode("error")`, which raises at any host synchronisation."""
    from dgmoe.bench.config import ModelBenchConfig
    from dgmoe.bench.models import _build, _steps
    from dgmoe.devices import fp32_arithmetic

    cfg = ModelBenchConfig((name,), img_size=224, batch_size=8, device="cuda", precision=precision,
                           **({"model_kwargs": {name: model_kwargs}} if model_kwargs else {}))
    torch.manual_seed(0)
    train_step, _ = _steps(_build(name, cfg), cfg)
    with fp32_arithmetic(precision, "cuda"):
        train_step()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            train_step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
