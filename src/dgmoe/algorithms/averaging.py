"""Weight averaging: the one rule by which dgmoe averages networks' weights, during training (SWAD, SMA, ERM++'s
moving average) and after it (`dgmoe soup`: uniform, greedy and ratatouille soups, WiSE-FT).

- *What is averaged*: every floating-point entry of a state dict, parameters and BatchNorm running statistics
  alike (as the SMA code averages the whole state dict). The other entries (integer buffers: BatchNorm's
  `num_batches_tracked`) are not averaged but taken from the *reference* network: the online network of SWAD
  and SMA, the first member of a soup, the fine-tuned network of WiSE-FT.
- *The average*: the weighted mean theta = sum_m w_m theta_m / sum_m w_m; uniform (w_m = 1) for soups (Rame et
  al., DiWA, NeurIPS 2022, Eq. 1; Wortsman et al., Model soups, ICML 2022) and SMA (Arpit et al., NeurIPS 2022,
  Sec. 3), (1 - alpha, alpha) for WiSE-FT (Wortsman et al., CVPR 2022, Eq. 1), iteration counts for SWAD's
  segment means (Cha et al., NeurIPS 2021, Alg. 1: every iteration in the window weighs the same).
- *Two forms of it*: `weighted_mean` (state dicts) and `mean_of` (one tensor each) take the members at once
  and accumulate in float64 (float32 on a device without float64: MPS), then cast to the reference's dtype,
  so that the mean of equal members is each member bit for bit; `running_mean_` updates a mean in place as each
  member arrives, in the mean's own dtype (a moving average over every training step cannot keep its members):
  adding theta with weight w to a mean of total weight W - w gives theta_hat + (w / W) (theta - theta_hat).

SWAD's official code recomputes BatchNorm statistics with 500 extra forward passes after averaging; dgmoe does
not (ViT and GMoE have no BatchNorm; for ResNets the averaged running statistics are used).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch
import torch.nn as nn

#: elements of one entry averaged at once: bounds `mean_of`'s float64 temporaries to a few of 8 MiB
CHUNK = 1 << 20


def is_averaged(tensor: torch.Tensor) -> bool:
    """Whether weight averaging averages this state-dict entry (else it is the reference network's)."""
    return tensor.is_floating_point()


def averaged_tensors(network: nn.Module) -> list[torch.Tensor]:
    """The tensors that weight averaging averages, as views into `network` (writing to them writes to it)."""
    return [t for t in network.state_dict().values() if is_averaged(t)]


def copy_integer_buffers(src: nn.Module, dst: nn.Module) -> None:
    """Give `dst` the entries that are not averaged from `src`, its reference network."""
    dst_state = dst.state_dict()
    for name, tensor in src.state_dict().items():
        if not is_averaged(tensor):
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


def _accumulation_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


@torch.no_grad()
def mean_of(tensors: Sequence[torch.Tensor], weights: Sequence[float] | None = None,
            dtype: torch.dtype | None = None) -> torch.Tensor:
    """sum_m w_m t_m / sum_m w_m of same-shaped tensors (uniform without `weights`), summed in the members' order
    in float64 and cast to `dtype` (default: the first tensor's), `CHUNK` elements at a time."""
    if not tensors:
        raise ValueError("a weight average needs at least one member")
    if weights is not None and len(weights) != len(tensors):
        raise ValueError(f"{len(weights)} weights for {len(tensors)} members")
    first = tensors[0]
    total = float(len(tensors)) if weights is None else float(sum(weights))
    if total == 0.0:
        raise ValueError("a weighted mean needs weights that do not sum to 0")
    acc = _accumulation_dtype(first.device)
    flat = [t.detach().reshape(-1) for t in tensors]
    out = torch.empty(first.numel(), dtype=dtype or first.dtype, device=first.device)
    for start in range(0, first.numel(), CHUNK):
        parts = [f[start:start + CHUNK].to(acc) for f in flat]
        if weights is not None:
            parts = [w * p for w, p in zip(weights, parts)]
        summed = parts[0]
        for part in parts[1:]:  # in members' order: the mean of equal members is each of them, -0.0 too
            summed = summed + part
        out[start:start + CHUNK] = (summed / total).to(out.dtype)
    return out.view(first.shape)


def weighted_mean(states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float] | None = None,
                  reference: int = 0) -> dict[str, torch.Tensor]:
    """The weight average of state dicts holding the same entries: every averaged entry the (weighted) mean of
    the members' (`mean_of`) in the reference member's dtype, every other entry the reference member's."""
    ref = states[reference]
    for other in states:
        if set(other) != set(ref):
            differ = sorted(set(other) ^ set(ref))
            raise ValueError(f"the states to average hold different entries ({', '.join(differ[:3])}, ...)")
    return {key: mean_of([s[key] for s in states], weights, first.dtype) if is_averaged(first) else first.clone()
            for key, first in ref.items()}


@torch.no_grad()
def running_mean_(average: list[torch.Tensor], new: list[torch.Tensor], total: float, weight: float = 1.0) -> None:
    """Turn the mean of total weight `total - weight` into the mean of total weight `total` by adding `new` with
    `weight` (in place; uniform: the mean of `total - 1` items becomes the mean of `total` items)."""
    torch._foreach_lerp_(average, new, weight / total)
