"""Weight averaging shared by SWAD and SMA: which tensors are averaged and how they are flattened.

Every floating-point entry of the network's state dict is averaged: parameters and BatchNorm running
statistics alike (as the SMA code averages the whole state dict). Integer buffers (BatchNorm's
`num_batches_tracked`) are copied from the online network. SWAD's official code recomputes BatchNorm
statistics with 500 extra forward passes after averaging; dgmoe does not (ViT and GMoE have no BatchNorm;
for ResNets the averaged running statistics are used).
"""
from __future__ import annotations

import torch
import torch.nn as nn


def averaged_tensors(network: nn.Module) -> list[torch.Tensor]:
    """The tensors that weight averaging averages, as views into `network` (writing to them writes to it)."""
    return [t for t in network.state_dict().values() if t.is_floating_point()]


def copy_integer_buffers(src: nn.Module, dst: nn.Module) -> None:
    dst_state = dst.state_dict()
    for name, tensor in src.state_dict().items():
        if not tensor.is_floating_point():
            dst_state[name].copy_(tensor)


def num_averaged(network: nn.Module) -> int:
    return sum(t.numel() for t in averaged_tensors(network))


def flatten(network: nn.Module) -> torch.Tensor:
    """All averaged tensors of `network` as one float32 vector (a copy)."""
    return torch.cat([t.detach().reshape(-1).float() for t in averaged_tensors(network)])


@torch.no_grad()
def load_flat(network: nn.Module, vector: torch.Tensor) -> None:
    """Write a vector made by `flatten` back into `network`'s averaged tensors."""
    offset = 0
    for t in averaged_tensors(network):
        n = t.numel()
        t.copy_(vector[offset:offset + n].view_as(t))
        offset += n
    if offset != vector.numel():
        raise ValueError(f"weight vector has {vector.numel()} entries, the network averages {offset}")


@torch.no_grad()
def running_mean_(average: list[torch.Tensor], new: list[torch.Tensor], count: int) -> None:
    """Turn the mean of `count - 1` items into the mean of `count` items by adding `new`."""
    torch._foreach_lerp_(average, new, 1.0 / count)
