"""One global batch across processes: randomness and batch statistics that do not depend on how many
processes share a batch.

Under data parallelism (`torchrun`, `dgmoe.engine.distributed`) every process holds a contiguous shard of
each training domain's minibatch and gradients are averaged. That equals one process training on the
whole batch only if
1. every per-sample random draw (stochastic depth, dropout, MoE gate noise) gives a sample the numbers it
   would get in one process, and
2. every statistic over the batch (MoE importance and load, per-domain risks, CORAL/MMD features, Fishr's
   gradient variances, IRM's gradients) is computed over the global batch.

A `Shard` says where this process's samples sit in the batch of one forward. While one is active
(`use_shard`), `per_sample` draws the whole global batch's numbers from the generator every process shares
(same seed, same sequence of draws) and keeps the local rows; `all_reduce_sum` and `gather_samples` combine
statistics across processes, differentiably (each process then computes the same loss from the same
global statistics, and the backward passes of these collectives, summed over processes, together with the
engine's gradient averaging give exactly the one-process gradient). Without a shard (one process, tests,
inference) all of them are plain local operations that draw and compute exactly what they did before.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn as nn

from dgmoe.scope import SCOPE, scoped


@dataclass(frozen=True)
class Shard:
    """This process's part of a global batch: `index[i]` is the position of local sample i in the global
    batch of `size` samples. Every process holds the same number of samples."""

    size: int
    index: torch.Tensor
    group: dist.ProcessGroup | None = None  # None = the default group

    def to(self, device: torch.device | str) -> "Shard":
        return Shard(self.size, self.index.to(device), self.group)


def concat_shards(shards: list[Shard | None]) -> Shard | None:
    """The shard of a concatenation of batches (global order: the batches one after the other)."""
    if all(s is None for s in shards):
        return None
    if any(s is None for s in shards):
        raise ValueError("cannot concatenate sharded and unsharded batches")
    sharded = [s for s in shards if s is not None]  # all of them
    offsets, index, total = 0, [], 0
    for s in sharded:
        index.append(s.index + offsets)
        offsets += s.size
        total += s.size
    return Shard(total, torch.cat(index), sharded[0].group)


def active_shard() -> Shard | None:
    return SCOPE.shard


@contextlib.contextmanager
def use_shard(shard: Shard | None) -> Iterator[None]:
    """Make `shard` the batch layout of the forwards run inside the block (None: no sharding)."""
    with scoped(shard=shard):
        yield


def per_sample(shape: tuple[int, ...], fill: Callable[[torch.Tensor], torch.Tensor], like: torch.Tensor,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """A random tensor of `shape` whose first dimension indexes the samples of the current forward, filled
    in place by `fill` (e.g. `lambda t: t.bernoulli_(p)`). Under an active shard the global batch's tensor
    is drawn and this process's rows are kept, so a sample's numbers do not depend on the process count."""
    shard = SCOPE.shard
    dtype = dtype or like.dtype
    if shard is None:
        return fill(torch.empty(shape, dtype=dtype, device=like.device))
    if shape[0] != len(shard.index):
        raise RuntimeError(f"per-sample draw for {shape[0]} samples inside a forward over {len(shard.index)}; "
                           "a sharded forward must keep the sample dimension first")
    full = fill(torch.empty((shard.size, *shape[1:]), dtype=dtype, device=like.device))
    return full.index_select(0, shard.index)


def _world(shard: Shard | None) -> int:
    if shard is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(shard.group)


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        out = tensor.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def all_reduce_sum(tensor: torch.Tensor, shard: Shard | None = None) -> torch.Tensor:
    """Sum of `tensor` over the processes sharing the batch (differentiable); `tensor` itself without one.
    `shard` defaults to the active one."""
    shard = shard if shard is not None else SCOPE.shard
    if shard is None or _world(shard) == 1:
        return tensor
    return _AllReduceSum.apply(tensor, shard.group)


class _GatherSamples(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local: torch.Tensor, index: torch.Tensor, size: int, group) -> torch.Tensor:  # type: ignore[override]
        world = dist.get_world_size(group)
        parts = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(parts, local.contiguous(), group=group)
        positions = [torch.empty_like(index) for _ in range(world)]
        dist.all_gather(positions, index.contiguous(), group=group)
        full = local.new_empty((size, *local.shape[1:]))
        full[torch.cat(positions)] = torch.cat(parts)
        ctx.save_for_backward(index)
        ctx.group = group
        return full

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (index,) = ctx.saved_tensors
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad.index_select(0, index), None, None, None


def gather_samples(local: torch.Tensor, shard: Shard | None) -> torch.Tensor:
    """The global batch's rows of a per-sample tensor (features, losses), in global order, differentiable;
    `local` itself without a shard or with one process."""
    if shard is None or _world(shard) == 1:
        return local
    return _GatherSamples.apply(local, shard.index, shard.size, shard.group)


def global_mean(per_sample_values: torch.Tensor, shard: Shard | None) -> torch.Tensor:
    """Mean over the global batch of per-sample values `[n, ...]` (over the first dimension)."""
    if shard is None or _world(shard) == 1:
        return per_sample_values.mean(0)
    return all_reduce_sum(per_sample_values.sum(0), shard) / shard.size


class Dropout(nn.Module):
    """`nn.Dropout` whose mask is drawn per sample (`dgmoe.sharding.per_sample`), so that under multi-process
    training a sample's mask does not depend on the process count. The numbers equal `F.dropout`'s."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask = per_sample(tuple(x.shape), lambda t: t.bernoulli_(keep), x)
        return x * (mask * (1.0 / keep))

    def extra_repr(self) -> str:
        return f"p={self.p}"
