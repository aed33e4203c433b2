"""Where a command computes and in which fp32 arithmetic: `--device` and `--precision`, declared once.

`--device auto` (every command's default) is CUDA when torch sees a CUDA device, else the CPU; `resolve_device`
turns it into the device actually used, which is what a run's config.json records (never "auto"). Any torch
device name (cpu, cuda, cuda:1, mps) is taken as given.

`--precision` (`PRECISIONS`): fp32 computes in IEEE fp32, also on CUDA, where TF32 is switched off for matmuls and
cuDNN convolutions (torch's own default lets cuDNN use TF32); tf32 keeps fp32 weights and activations but lets
CUDA matmuls and convolutions round their inputs to TF32 (10 mantissa bits; NVIDIA Ampere and later), torch's
`set_float32_matmul_precision("high")`; bf16 is autocast to bfloat16. TF32 exists on CUDA only: `check_precision`
refuses it elsewhere in one line naming the flag. `fp32_arithmetic` sets the TF32 switches once around a run and
restores them after, so that an importing program keeps its own.

`--compile-mode` (with `--compile`): torch.compile's mode; reduce-overhead replays each compiled block as a CUDA
graph (`check_compile_mode` refuses it off CUDA, where there is nothing to capture).

This module imports torch only inside its functions, so that option declarations stay cheap to import.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from dgmoe.errors import UsageError
from dgmoe.settings import setting

AUTO = "auto"
PRECISIONS = ("fp32", "tf32", "bf16")
PRECISION_HELP = ("Arithmetic of the step: fp32 (IEEE, TF32 off on CUDA), tf32 (fp32 weights, TF32 matmuls and "
                  "convolutions; CUDA only) or bf16 (autocast).")


def device_setting(what: str = "") -> Any:
    """The `--device` setting of a command (`what`: whose device, e.g. 'of the predictions'): default auto."""
    return setting(AUTO, f"torch device{' ' + what if what else ''}: auto (CUDA when this machine has it, else "
                         "cpu), cpu, cuda, cuda:1, mps.")


def precision_setting(help: str = PRECISION_HELP) -> Any:
    """The `--precision` setting of a command: default fp32."""
    return setting("fp32", help, choices=PRECISIONS)


COMPILE_MODES = ("default", "reduce-overhead")


def compile_mode_setting() -> Any:
    """The `--compile-mode` setting, read with `--compile`: torch.compile's mode of every compiled block."""
    return setting("default", "torch.compile's mode with --compile: default, or reduce-overhead (each compiled block's "
                              "graph captured and replayed as a CUDA graph where its shapes are static: fewer "
                              "kernel launches from the host; CUDA only, more memory).", choices=COMPILE_MODES)


def check_compile_mode(mode: str, compile: bool, device: str) -> None:
    """Refuse a `--compile-mode` other than default without `--compile` (it would be ignored) or, for CUDA graphs
    (reduce-overhead), off CUDA."""
    if mode == "default":
        return
    if not compile:
        raise UsageError(f"--compile-mode {mode} is read by --compile only; add --compile or leave it out")
    if device_type(device) != "cuda":
        raise UsageError(f"--compile-mode {mode} captures CUDA graphs; --device {device} is not a CUDA device: use "
                         "--compile-mode default there")


def resolve_device(device: str) -> str:
    """The device `device` names: 'auto' becomes 'cuda' when torch sees a CUDA device, else 'cpu'; any other
    name is returned unchanged (checked where it is used)."""
    if device != AUTO:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_type(device: str) -> str:
    """'cuda' of 'cuda:1' ('auto' resolved first)."""
    return resolve_device(device).split(":")[0]


def check_precision(precision: str, device: str) -> None:
    """Refuse `--precision tf32` on a device without TF32 (anything but CUDA), before anything is written."""
    if precision == "tf32" and device_type(device) != "cuda":
        raise UsageError(f"--precision tf32 rounds CUDA matmuls to TF32; --device {device} is not a CUDA device: "
                         "use --precision fp32 (or bf16) there")


def describe(device: str, precision: str) -> str:
    """'cuda:0 (NVIDIA H200), tf32' or 'cpu, fp32': what a command's first line says it computes on."""
    resolved = resolve_device(device)
    name = ""
    if resolved.startswith("cuda"):
        import torch

        with contextlib.suppress(RuntimeError, AssertionError):
            name = f" ({torch.cuda.get_device_name(resolved)})"
    return f"{resolved}{name}, {precision}"


def tf32_matmuls() -> bool:
    """Whether CUDA fp32 matmuls may run in TF32 now (inside `fp32_arithmetic('tf32', ...)`), read from the switch
    `fp32_arithmetic` sets (torch >= 2.9's `fp32_precision`, else the legacy `allow_tf32`): what the fused kernels
    of `dgmoe.moe.kernels` follow."""
    import torch

    matmul = torch.backends.cuda.matmul  # type: ignore[attr-defined]
    if hasattr(matmul, "fp32_precision"):
        return matmul.fp32_precision == "tf32"
    return bool(matmul.allow_tf32)


@contextlib.contextmanager
def fp32_arithmetic(precision: str, device: str) -> Iterator[None]:
    """Within: CUDA fp32 matmuls and cuDNN convolutions in TF32 for `precision` 'tf32', in IEEE fp32 for any
    other precision (bf16's fp32 parts too); the previous switches restored on exit. No-op off CUDA."""
    if device_type(device) != "cuda":
        yield
        return
    import torch

    mode = "tf32" if precision == "tf32" else "ieee"
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv  # type: ignore[attr-defined]
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9: the legacy allow_tf32 flags must not be mixed in
        saved = (matmul.fp32_precision, conv.fp32_precision)
        matmul.fp32_precision, conv.fp32_precision = mode, mode
        try:
            yield
        finally:
            matmul.fp32_precision, conv.fp32_precision = saved
        return
    saved_legacy = (matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    try:
        yield
    finally:
        matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved_legacy
