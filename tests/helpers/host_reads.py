"""Find the calls that read a tensor's value back to Python: on a GPU each one waits for the device (a host
synchronisation), so a training step must make none. Counted on the CPU by a TorchFunctionMode, so a test
catches a sync by construction without a GPU."""
from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode

#: tensor methods and functions whose result needs the tensor's values on the host
READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "nonzero", "bincount", "unique",
         "masked_select", "numpy", "cpu", "argwhere"}


class HostReads(TorchFunctionMode):
    """Records `(name, file:line)` of every host read made by code outside torch's optimisers (whose CPU
    step counters are read on the CPU by design, also when the parameters live on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        bool_index = name in ("__getitem__", "__setitem__") and _has_bool_index(args[1] if len(args) > 1 else None)
        if name in READS or bool_index:
            caller = sys._getframe(1)
            where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
            if "torch/optim" not in where:
                self.calls.append((name, where))
        return func(*args, **(kwargs or {}))


def _has_bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)
