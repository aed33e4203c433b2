"""Compile every Triton kernel variant dgmoe launches for an SM90 (H100/H200) target, through Triton IR,
TTGIR, LLVM IR, PTX and ptxas to a cubin, without a GPU: what only the compiler (not the interpreter)
checks; with the argument `autotune`, every tile config `triton.autotune` may pick instead. Run as a script
with TRITON_INTERPRET=0 (test_kernels_compile.py does); written against the
compiler API of triton 3.9 (`ASTSource.make_ir(target, ...)`)."""
from __future__ import annotations

import os
import sys

import triton
from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

from dgmoe.moe.kernels import gemm, router_kernels, tiles

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = CUDABackend(TARGET)
STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")


def compile_kernel(fn, signature: dict, constants: dict, num_stages: int = 3, num_warps: int = 4) -> dict:
    """Compile `fn` to an SM90 cubin; returns the compiler's metadata (its "shared": shared memory per block)."""
    signature = {**signature, **{name: "constexpr" for name in constants}}
    source = ASTSource(fn, signature, constants)
    options = BACKEND.parse_options({"num_stages": num_stages, "num_warps": num_warps})
    context = ir.context()
    ir.load_dialects(context)
    BACKEND.load_dialects(context)
    module = source.make_ir(TARGET, options, BACKEND.get_codegen_implementation(options), BACKEND.get_module_map(),
                            context)
    stages: dict = {}
    BACKEND.add_stages(stages, options, source.language)
    metadata: dict = {}
    for stage in STAGES:
        module = stages[stage](module, metadata)
    return metadata


def _ptr(dtype: str) -> str:
    return "*" + dtype


#: (gather, scatter, bias, scale, store_pre, act, act_grad): the launches of `grouped_rows` in experts.py
ROWS_VARIANTS = ((True, False, True, False, True, 1, 0), (True, False, True, False, True, 2, 0),
                 (False, True, True, True, True, 0, 0), (True, False, False, True, False, 0, 1),
                 (True, False, False, True, False, 0, 2), (False, True, False, False, False, 0, 0))
#: (gather left, gather right, scale, act right): the launches of `grouped_weight_grad`
WEIGHT_GRAD_VARIANTS = ((False, True, False, 0), (True, False, True, 1), (True, False, True, 2))
#: shared memory one block may use on SM90 (227 KiB)
SM90_SHARED = 232448


def compile_rows(dtype: str, precision: str, variant: tuple, tile: tuple) -> dict:
    gather, scatter, bias, scale, pre, act, act_grad = variant
    signature = {name: _ptr(dtype) for name in ("X", "W", "bias", "Z", "pre_out")}
    signature.update(src_index=_ptr("i64"), expert_sorted=_ptr("i64"), scale=_ptr("fp32"),
                     out=_ptr("fp32" if scatter else dtype), out_index=_ptr("i64"), num_rows="i32",
                     K="i32", cols_out="i32", stride_x="i32", stride_we="i32", stride_wk="i32",
                     stride_wn="i32")
    bm, bn, bk, stages, warps = tile
    return compile_kernel(gemm.grouped_rows, signature, dict(
        GATHER=gather, SCATTER=scatter, HAS_BIAS=bias, HAS_SCALE=scale, STORE_PRE=pre, ACT=act,
        ACT_GRAD=act_grad, PRECISION=precision, UPCAST=False, BM=bm, BN=bn, BK=bk), stages, warps)


def compile_weight_grad(dtype: str, precision: str, variant: tuple, tile: tuple) -> dict:
    gather_l, gather_r, scale, act_r = variant
    signature = dict(L=_ptr(dtype), R=_ptr(dtype), row_index=_ptr("i64"), scale=_ptr("fp32"),
                     offsets=_ptr("i32"), dW=_ptr("fp32"), db=_ptr("fp32"), P="i32", Q="i32", num_rows="i32")
    bp, bq, br, stages, warps = tile
    return compile_kernel(gemm.grouped_weight_grad, signature, dict(
        GATHER_L=gather_l, GATHER_R=gather_r, HAS_SCALE=scale, HAS_DB=True, ACT_R=act_r,
        PRECISION=precision, UPCAST=False, BP=bp, BQ=bq, BR=br), stages, warps)


def every_variant() -> None:
    """Every variant of every kernel at the fixed tile (64x64x32, triton's default stages and warps)."""
    fixed = (*tiles.FIXED_TILE, 3, 4)
    for dtype, precision in (("fp32", "ieee"), ("fp32", "tf32"), ("bf16", "ieee")):
        for variant in ROWS_VARIANTS:
            compile_rows(dtype, precision, variant, fixed)
        for variant in WEIGHT_GRAD_VARIANTS:
            compile_weight_grad(dtype, precision, variant, fixed)
    f32 = _ptr("fp32")
    for k in (1, 2, 4):
        for noise in (False, True):
            signature = dict(S=f32, noise=f32, noisy_out=f32, probs_out=f32, gates_out=f32, idx_out=_ptr("i64"),
                             kth_out=_ptr("i32"), imp_part=f32, load_part=f32, num_rows="i32", num_experts="i32",
                             sigma="fp32")
            compile_kernel(router_kernels.route_forward, signature, dict(
                K=k, KP=max(triton.next_power_of_2(k), 2), RENORM=k > 1, NOISE=noise, LOAD=noise, BT=16, BE=8))
            signature = dict(S=f32, noisy_in=f32, probs_in=f32, gates_in=f32, idx_in=_ptr("i64"),
                             kth_in=_ptr("i32"), d_noisy_out=f32, d_probs_out=f32, d_gates=f32, d_imp=f32,
                             d_load=f32, d_s=f32, num_rows="i32", num_experts="i32", sigma="fp32")
            compile_kernel(router_kernels.route_backward, signature,
                           dict(K=k, RENORM=k > 1, LOAD=noise, BT=16, BE=8))


def every_autotune_config() -> None:
    """Every config `triton.autotune` may pick (`tiles.AUTOTUNE_TILES`, with its stages and warps), on the
    forward's gather-GEMM (bias, GELU, the pre-activation stored) and the heaviest weight gradient (gathered,
    scaled, activation applied as loaded), in TF32 (fp32 operands: the most shared memory) and bf16: each
    compiles to a cubin whose shared memory fits an SM90 block."""
    for tile in tiles.tile_set(interpreting=False):
        for dtype, precision in (("fp32", "tf32"), ("bf16", "ieee")):
            for metadata in (compile_rows(dtype, precision, ROWS_VARIANTS[0], tile),
                             compile_weight_grad(dtype, precision, WEIGHT_GRAD_VARIANTS[1], tile)):
                assert metadata["shared"] <= SM90_SHARED, (tile, dtype, metadata["shared"])


def main() -> None:
    assert os.environ.get("TRITON_INTERPRET") != "1", "run with TRITON_INTERPRET=0"
    if sys.argv[1:] == ["autotune"]:
        every_autotune_config()
        print("compiled every autotune config for sm_90")
    else:
        every_variant()
        print("compiled for sm_90")


if __name__ == "__main__":
    main()
