"""What `dgmoe train` refuses before torch is imported, in one line and well under a CPU-second: model, algorithm
and dataset names, `--test-envs` out of a catalogue dataset's declared domains (`dgmoe.names`), a `--pretrained`
file that is not there, a `--device cuda` on a machine that shows no GPU, `--precision tf32` or
`--compile-mode reduce-overhead` off CUDA, text-head flags without `--head zeroshot`, `--head zeroshot` on a
model without a text tower, and flag combinations that would run something other than the algorithm's name
(`dgmoe.engine.combinations`). Everything else is checked once the data and the model are loaded
(`dgmoe.engine.setup.prepare_run`), with the same words where both check.
"""
from __future__ import annotations

import os
from pathlib import Path

from dgmoe.devices import AUTO, check_compile_mode, check_precision
from dgmoe.engine.combinations import check_combination
from dgmoe.engine.config import RunConfig
from dgmoe.errors import UsageError
from dgmoe.names import check_names, check_pretrained_file, check_test_envs, check_text_head


def no_cuda_message(device: str) -> str:
    return f"--device {device}: this machine has no CUDA device; use --device cpu"


def surely_no_cuda() -> bool:
    """True when no CUDA device can be visible to torch: CUDA_VISIBLE_DEVICES hides all, or neither an NVIDIA
    driver (/proc/driver/nvidia/gpus, /dev/nvidia0) nor ROCm (/dev/kfd) is there. Unsure means False: torch
    then answers (`dgmoe.engine.setup.check_device`)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return True
    gpus = Path("/proc/driver/nvidia/gpus")
    return not ((gpus.is_dir() and any(gpus.iterdir())) or Path("/dev/nvidia0").exists() or Path("/dev/kfd").exists())


def precheck(cfg: RunConfig) -> None:
    """Raise `UsageError` for what can be told wrong without torch (see the module docstring)."""
    device = cfg.execution.device
    if device.split(":")[0] == "cuda" and surely_no_cuda():
        raise UsageError(no_cuda_message(device))
    if device == AUTO and surely_no_cuda():
        device = "cpu"  # (what auto resolves to here; otherwise torch answers once the run is prepared)
    if device != AUTO:
        check_precision(cfg.training.precision, device)
        check_compile_mode(cfg.execution.compile_mode, cfg.execution.compile, device)
    check_names(cfg.data.dataset, cfg.model.name, cfg.algorithm.name)
    check_test_envs(cfg.data.dataset, cfg.data.test_envs)
    check_pretrained_file(cfg.model.pretrained, cfg.model.name)
    cfg.model.check_head()
    check_text_head(cfg.model.name, cfg.model.head)
    check_combination(cfg.algorithm.name, cfg.training.steps, cfg.peft.mode, cfg.algorithm.hparams)
