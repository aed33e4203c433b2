"""Data-parallel training under torchrun (`torchrun --nproc_per_node N -m dgmoe train ...`).

Every rank draws the same global batch for a step (batches are a pure function of seed, step and domain),
keeps its own contiguous shard of each domain's minibatch, and gradients are averaged over ranks before
each optimiser step. Each shard says where its samples sit in the global batch (`dgmoe.sharding.Shard`),
so that per-sample random draws and batch statistics (MoE load balancing, the DG penalties) are those of
the global batch: N processes train as one, within float rounding (tested for GMoE with stochastic depth
and gate noise and for CORAL, MMD, VREx, GroupDRO, IRM and Fishr). What stays per process is listed in
docs/design.md (BatchNorm statistics, as DDP without SyncBatchNorm; MoE capacity; expert dropout).
gloo on CPU, NCCL on CUDA. Only rank 0 evaluates and writes; the other ranks wait at a barrier.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Iterator, Mapping

import torch
import torch.distributed as dist

from dgmoe.data.base import Batch
from dgmoe.sharding import Shard


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


@contextlib.contextmanager
def process_group(device: str) -> Iterator[DistInfo]:
    """The process group torchrun describes in the environment, joined for the `with` block (`DistInfo()`
    without torchrun; a group the caller joined already is used as it is and left to the caller).

    A group joined here is left when the block ends: after a barrier, so that no rank tears its connections
    down while a peer still talks to it (gloo aborts that peer: SIGABRT). When the block raises, it is left as
    it is: the peers wait in a collective that will not come, and torchrun ends them once this rank exits."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        yield DistInfo()
        return
    if dist.is_initialized():
        yield DistInfo(dist.get_rank(), dist.get_world_size())
        return
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    info = DistInfo(dist.get_rank(), dist.get_world_size())
    yield info
    dist.barrier()
    dist.destroy_process_group()


def shard(minibatches: list[Batch], info: DistInfo) -> list[Batch]:
    """This rank's contiguous slice of every domain's minibatch, with its place in the global batch."""
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
        out.append(Batch(b.x[sl], b.y[sl], meta, Shard(n, torch.arange(sl.start, sl.stop))))
    return out


def make_gradient_averager(module: torch.nn.Module, info: DistInfo):
    """A function averaging the gradients of `module` across ranks (one flat all-reduce). A parameter that
    has a gradient on some ranks only (e.g. an expert no local token chose) counts as zero on the others,
    as in one process, where the gradient over the global batch exists."""
    def average() -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            return
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=params[0].device)
        dist.all_reduce(has)
        params = [p for p, n in zip(params, has.tolist()) if n]
        if not params:
            return
        grads = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
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


def average_metrics(metrics: Mapping[str, float | torch.Tensor], info: DistInfo) -> dict[str, float]:
    """An update's scalar metrics as floats (read back from the device), averaged over ranks so that they
    describe the global batch. (The trainer itself sums them on the device, `dgmoe.engine.step_metrics`.)"""
    if not info.enabled or not metrics:
        return {k: float(v) for k, v in metrics.items()}
    keys = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(values)
    return {k: v / info.world_size for k, v in zip(keys, values.tolist())}
