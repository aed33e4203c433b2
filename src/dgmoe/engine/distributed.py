"""Data-parallel training under torchrun (`torchrun --nproc_per_node N -m dgmoe train ...`).

Every rank draws the same global batch for a step (batches are a pure function of seed, step and domain),
keeps its own contiguous shard of each domain's minibatch, and gradients are averaged over ranks before
each optimiser step, so N processes train on the same global batch as one. gloo on CPU, NCCL on CUDA.
Only rank 0 evaluates and writes; the other ranks wait at a barrier.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dgmoe.data.base import Batch


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_from_env(device: str) -> DistInfo:
    """Join the process group torchrun describes in the environment (no-op without torchrun)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size())


def shard(minibatches: list[Batch], info: DistInfo) -> list[Batch]:
    """This rank's contiguous slice of every domain's minibatch."""
    if not info.enabled:
        return minibatches
    out = []
    for b in minibatches:
        n = len(b.y)
        if n % info.world_size:
            raise ValueError(f"batch size {n} is not divisible by the {info.world_size} processes")
        size = n // info.world_size
        sl = slice(info.rank * size, (info.rank + 1) * size)
        meta = None if b.meta is None else {k: v[sl] for k, v in b.meta.items()}
        out.append(Batch(b.x[sl], b.y[sl], meta))
    return out


def make_gradient_averager(module: torch.nn.Module, info: DistInfo):
    """A function averaging the gradients of `module` across ranks (one flat all-reduce)."""
    def average() -> None:
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= info.world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
    return average


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def average_metrics(metrics: dict[str, float], info: DistInfo) -> dict[str, float]:
    """Average an update's scalar metrics over ranks, so records describe the global batch."""
    if not info.enabled or not metrics:
        return metrics
    keys = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(values)
    return {k: v / info.world_size for k, v in zip(keys, values.tolist())}
