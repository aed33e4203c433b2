"""Resampling pretrained ViT weights to another token grid or patch size, as timm does when it loads them.

- The position embedding's grid part is interpolated bicubically in float32 (`resize_pos_embed`).
  `antialias=True` (the default) is timm >= 0.9's `resample_abs_pos_embed`; `antialias=False` is the
  plain bicubic of timm 0.5-0.6's `resize_pos_embed`, which the GMoE code base used. The two differ when
  upsampling too: torch's antialiased bicubic is Keys' kernel with a = -0.5 (as PIL), the plain one uses
  a = -0.75; when downsampling the antialiased kernel is also widened by the scale factor.
- A checkpoint format may declare its own code's convention (`PosResample`): DINOv2's hub models interpolate
  with a scale factor of (new + 0.1) / old instead of the output size (`interpolate_offset`, a kludge kept
  for its released weights) and without antialias, at every forward; resampled once at load with the same
  call, the embedding is the one DINOv2's own forward uses at that grid.
- The patch embedding kernel is resized with FlexiViT's pseudo-inverse resize (Beyer et al. 2023, §3.4,
  "PI-resize"; `resample_patch_embed`), as timm's `resample_patch_embed`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

#: How `antialias` is reported (`LoadReport.resize_method`).
RESIZE_METHODS = {True: "bicubic with antialias (timm >= 0.9)", False: "bicubic without antialias (timm 0.5-0.6)"}


@dataclass(frozen=True)
class PosResample:
    """How a checkpoint's own code resamples its position embedding: bicubic, with or without `antialias`,
    to the output size (`offset` 0) or by the scale factor (new + offset) / old (DINOv2's
    `interpolate_offset`)."""

    antialias: bool
    offset: float
    label: str


def _square_grid(num_tokens: int) -> tuple[int, int]:
    side = math.isqrt(num_tokens)
    if side * side != num_tokens:
        raise ValueError(f"position embedding has {num_tokens} grid tokens, which is not a square grid; "
                         "pass old_grid")
    return side, side


def resize_pos_embed(pos_embed: torch.Tensor, new_grid: Sequence[int], num_prefix_tokens: int = 1,
                     antialias: bool = True, old_grid: Sequence[int] | None = None,
                     offset: float = 0.0) -> torch.Tensor:
    """Bicubically resample the grid part of a position embedding `[1, prefix + H*W, D]` to `new_grid`
    (height, width); the `num_prefix_tokens` leading tokens (class token) are kept as they are.

    The grid is interpolated in float32 and cast back; `old_grid` defaults to the square grid. `offset` > 0
    interpolates by the scale factor (new + offset) / old per axis, as DINOv2's `interpolate_pos_encoding`.
    """
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    old_grid = tuple(old_grid) if old_grid is not None else _square_grid(grid.shape[1])
    new_grid = tuple(new_grid)
    if old_grid == new_grid:
        return pos_embed
    if old_grid[0] * old_grid[1] != grid.shape[1]:
        raise ValueError(f"old_grid {old_grid} does not hold the {grid.shape[1]} grid tokens")
    dim = grid.shape[-1]
    grid = grid.float().reshape(1, *old_grid, dim).permute(0, 3, 1, 2)
    if offset:
        scale = ((new_grid[0] + offset) / old_grid[0], (new_grid[1] + offset) / old_grid[1])
        grid = F.interpolate(grid, scale_factor=scale, mode="bicubic", align_corners=False, antialias=antialias)
        if tuple(grid.shape[-2:]) != new_grid:
            raise ValueError(f"a scale factor with offset {offset} gives a {tuple(grid.shape[-2:])} grid, "
                             f"not {new_grid}")
    else:
        grid = F.interpolate(grid, size=new_grid, mode="bicubic", align_corners=False, antialias=antialias)
    grid = grid.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], dim).to(pos_embed.dtype)
    return torch.cat([prefix, grid], dim=1)


def resize_matrix(old: int, new: int, antialias: bool = True, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The `[new, old]` matrix B of the 1-D bicubic resize x -> B x (the image resize, one axis at a time).

    It is read off F.interpolate applied to the unit vectors along the width axis (torch's antialiased
    bicubic mishandles inputs of width 1, so the height axis cannot be used for a 1-D resize).
    """
    basis = torch.eye(old, dtype=dtype).reshape(old, 1, 1, old)
    resized = F.interpolate(basis, size=(1, new), mode="bicubic", align_corners=False, antialias=antialias)
    return resized.reshape(old, new).T


def resample_patch_embed(weight: torch.Tensor, new_size: Sequence[int], antialias: bool = True) -> torch.Tensor:
    """Resize a patch embedding kernel `[D, C, h, w]` to `[D, C, *new_size]` (FlexiViT §3.4, PI-resize).

    A patch x resized to the new patch size is B x, and the new kernel ŵ should give the same token:
    <B x, ŵ> = <x, w> for every x, i.e. B^T ŵ = w. FlexiViT takes ŵ = pinv(B^T) w: the least-squares
    solution when the patch shrinks (over x ~ N(0, I)), the exact minimum-norm one when it grows. The
    bicubic resize is separable, B = B_h ⊗ B_w, and the pseudo-inverse of a Kronecker product is the
    Kronecker product of the pseudo-inverses, so per output and input channel ŵ = pinv(B_h)^T w pinv(B_w):
    two small pseudo-inverses, all in float64 (timm inverts the whole `[h'w', hw]` B in float32).
    """
    old_size, new_size = tuple(weight.shape[-2:]), tuple(new_size)
    if old_size == new_size:
        return weight
    p_h = torch.linalg.pinv(resize_matrix(old_size[0], new_size[0], antialias))
    p_w = torch.linalg.pinv(resize_matrix(old_size[1], new_size[1], antialias))
    resized = torch.einsum("dchw,hH,wW->dcHW", weight.double(), p_h.to(weight.device), p_w.to(weight.device))
    return resized.to(weight.dtype)
