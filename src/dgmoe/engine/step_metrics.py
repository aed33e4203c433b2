"""An update's metrics, kept where they were computed until someone reads them.

Algorithms return their metrics (losses, penalties) as floats or as 0-dim tensors. Turning a GPU tensor
into a float waits for the GPU (a host synchronisation) and a step loop that did it every step would keep
the GPU idle while Python prepares the next step. So the engine adds tensors up on their device
(`StepMetrics.add`) and reads them back once per checkpoint (`means`), and hands sinks a `LazyMetrics`
view that converts a value only when a sink reads it (the console: at its print points).
"""
from __future__ import annotations

from typing import Iterator, Mapping

import torch
import torch.distributed as dist

Value = float | torch.Tensor


class LazyMetrics(Mapping[str, float]):
    """A read-only view of one update's metrics; tensors become floats on access."""

    def __init__(self, values: Mapping[str, Value]):
        self._values = dict(values)

    def __getitem__(self, key: str) -> float:
        return float(self._values[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class StepMetrics:
    """Sums of every metric over the updates since the last `clear()`, on the metric's device."""

    def __init__(self) -> None:
        self._sums: dict[str, Value] = {}
        self._counts: dict[str, int] = {}

    def add(self, metrics: Mapping[str, Value]) -> None:
        for key, value in metrics.items():
            if isinstance(value, torch.Tensor):  # summed in float64, as Python floats were
                value = value.detach().double()
            self._sums[key] = self._sums[key] + value if key in self._sums else value
            self._counts[key] = self._counts.get(key, 0) + 1

    def means(self, world_size: int = 1) -> dict[str, float]:
        """Each metric's mean over the updates, read back in one transfer; with `world_size` > 1 (a process
        group is initialised) averaged over the processes too, as the records describe the global batch."""
        keys = sorted(self._sums)
        values = torch.tensor([float(v) if not isinstance(v, torch.Tensor) else 0.0 for v in
                               (self._sums[k] for k in keys)], dtype=torch.float64)
        on_device = [i for i, k in enumerate(keys) if isinstance(self._sums[k], torch.Tensor)]
        if on_device:
            stacked = torch.stack([torch.as_tensor(self._sums[keys[i]]).double().reshape(()) for i in on_device])
            values[on_device] = stacked.cpu()
        if world_size > 1:
            values = values.to(_collective_device())
            dist.all_reduce(values)
            values = values.cpu() / world_size
        return {k: v / self._counts[k] for k, v in zip(keys, values.tolist())}

    def clear(self) -> None:
        self._sums.clear()
        self._counts.clear()


def _collective_device() -> torch.device:
    """NCCL reduces CUDA tensors only; gloo CPU ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
