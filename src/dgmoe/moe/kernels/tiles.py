"""The tiles of the grouped-GEMM kernels (`gemm.py`): fixed, or chosen per shape by `triton.autotune`.

`TILES` names the two launch modes the experts take (`expert_dispatch(..., tiles=...)`):
- "autotune" (the default): `grouped_rows_tuned` and `grouped_weight_grad_tuned`, `triton.autotune` over
  `AUTOTUNE_TILES`, keyed on the problem's shape (T*k rows, reduction and output widths: (T*k, d, hidden) or
  (T*k, hidden, d)) and on the launch's variant flags; the first call of each key times every config on the
  GPU, later calls reuse the winner. The set holds ScatterMoE's main tile (Tan et al. 2024: BLOCK_M 128,
  BLOCK_N 128, BLOCK_K 32, 4 stages, 4 warps), its halves, the earlier fixed 64x64x32 tile and a 32x32x32 tile
  for small T, where the large tiles leave most programs idle.
- "fixed": the plain kernels launched with `FIXED_TILE` (64x64x32), the tile before autotuning, kept as the
  benchmark's baseline (`dgmoe bench layer`: "moe Triton kernels fixed tiles").
Under Triton's interpreter (`TRITON_INTERPRET=1` when this module is imported, as triton itself reads it), the
config set is `INTERPRETER_TILE` alone, and both modes run it: one config, nothing timed, small tiles that only
cost time there.
"""
from __future__ import annotations

import os

import triton

from dgmoe.moe.kernels.gemm import grouped_rows, grouped_weight_grad

#: the launch modes of the experts' kernels
TILES: tuple[str, ...] = ("autotune", "fixed")
#: (rows, columns, reduction) of the fixed launch on a GPU
FIXED_TILE: tuple[int, int, int] = (64, 64, 32)
#: the one tile under the interpreter
INTERPRETER_TILE: tuple[int, int, int] = (16, 16, 16)
#: (rows, columns, reduction, num_stages, num_warps) of each config `triton.autotune` times on a GPU
AUTOTUNE_TILES: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 128, 32, 4, 4),  # ScatterMoE's main kernel
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (64, 64, 32, 3, 4),    # FIXED_TILE with triton's default stages and warps
    (32, 32, 32, 3, 4),    # small T
)
#: whether triton runs its interpreter in this process (read once, as triton reads it when kernels are defined)
INTERPRETING: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"


def tile_set(interpreting: bool = INTERPRETING) -> tuple[tuple[int, int, int, int, int], ...]:
    """The configs `triton.autotune` chooses among: `AUTOTUNE_TILES` on a GPU, `INTERPRETER_TILE` alone under
    the interpreter (stages and warps are the GPU compiler's and mean nothing there)."""
    return ((*INTERPRETER_TILE, 1, 1),) if interpreting else AUTOTUNE_TILES


def _configs(names: tuple[str, str, str]) -> list[triton.Config]:
    return [triton.Config(dict(zip(names, (bm, bn, bk))), num_stages=stages, num_warps=warps)
            for bm, bn, bk, stages, warps in tile_set()]


#: `grouped_rows` autotuned; the variant flags are in the key because the forward's first GEMM and the
#: backward's gradient of z1 share a shape (T*k, d, hidden)
grouped_rows_tuned = triton.autotune(
    configs=_configs(("BM", "BN", "BK")),
    key=["num_rows", "K", "cols_out", "GATHER", "SCATTER", "HAS_SCALE", "ACT", "ACT_GRAD", "PRECISION"],
)(grouped_rows)
#: `grouped_weight_grad` autotuned (`num_rows`: the T*k assignments, in the key only)
grouped_weight_grad_tuned = triton.autotune(
    configs=_configs(("BP", "BQ", "BR")),
    key=["num_rows", "P", "Q", "GATHER_L", "GATHER_R", "ACT_R", "PRECISION"],
)(grouped_weight_grad)


def fixed_tile(interpreting: bool = INTERPRETING) -> tuple[int, int, int]:
    """The tile of the "fixed" launch: `FIXED_TILE` on a GPU, `INTERPRETER_TILE` under the interpreter."""
    return INTERPRETER_TILE if interpreting else FIXED_TILE
