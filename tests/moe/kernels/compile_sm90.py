"""Compile every Triton kernel variant dgmoe launches for an SM90 (H100/H200) target, through Triton IR,
TTGIR, LLVM IR, PTX and ptxas to a cubin, without a GPU: what only the compiler (not the interpreter)
checks. Run as a script with TRITON_INTERPRET=0 (test_kernels_compile.py does); written against the
compiler API of triton 3.9 (`ASTSource.make_ir(target, ...)`)."""
from __future__ import annotations

import os

import triton
from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

from dgmoe.moe.kernels import gemm, router_kernels

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = CUDABackend(TARGET)
OPTIONS = BACKEND.parse_options({})
STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")


def compile_kernel(fn, signature: dict, constants: dict) -> None:
    signature = {**signature, **{name: "constexpr" for name in constants}}
    source = ASTSource(fn, signature, constants)
    context = ir.context()
    ir.load_dialects(context)
    BACKEND.load_dialects(context)
    module = source.make_ir(TARGET, OPTIONS, BACKEND.get_codegen_implementation(OPTIONS), BACKEND.get_module_map(),
                            context)
    stages: dict = {}
    BACKEND.add_stages(stages, OPTIONS, source.language)
    metadata: dict = {}
    for stage in STAGES:
        module = stages[stage](module, metadata)


def _ptr(dtype: str) -> str:
    return "*" + dtype


def main() -> None:
    assert os.environ.get("TRITON_INTERPRET") != "1", "run with TRITON_INTERPRET=0"
    rows_args = ("X", "W", "bias", "Z", "pre_out")
    for dtype, precision in (("fp32", "ieee"), ("fp32", "tf32"), ("bf16", "ieee")):
        # (gather, scatter, bias, scale, store_pre, act, act_grad): the four launches of experts.py
        for gather, scatter, bias, scale, pre, act, act_grad in (
                (True, False, True, False, True, 1, 0), (True, False, True, False, True, 2, 0),
                (False, True, True, True, True, 0, 0), (True, False, False, True, False, 0, 1),
                (True, False, False, True, False, 0, 2), (False, True, False, False, False, 0, 0)):
            signature = {name: _ptr(dtype) for name in rows_args}
            signature.update(src_index=_ptr("i64"), expert_sorted=_ptr("i64"), scale=_ptr("fp32"),
                             out=_ptr("fp32" if scatter else dtype), out_index=_ptr("i64"), num_rows="i32",
                             K="i32", cols_out="i32", stride_x="i32", stride_we="i32", stride_wk="i32",
                             stride_wn="i32")
            compile_kernel(gemm.grouped_rows, signature, dict(
                GATHER=gather, SCATTER=scatter, HAS_BIAS=bias, HAS_SCALE=scale, STORE_PRE=pre, ACT=act,
                ACT_GRAD=act_grad, PRECISION=precision, UPCAST=False, BM=64, BN=64, BK=32))
        for gather_l, gather_r, scale, act_r in ((False, True, False, 0), (True, False, True, 1),
                                                 (True, False, True, 2)):
            signature = dict(L=_ptr(dtype), R=_ptr(dtype), row_index=_ptr("i64"), scale=_ptr("fp32"),
                             offsets=_ptr("i32"), dW=_ptr("fp32"), db=_ptr("fp32"), P="i32", Q="i32")
            compile_kernel(gemm.grouped_weight_grad, signature, dict(
                GATHER_L=gather_l, GATHER_R=gather_r, HAS_SCALE=scale, HAS_DB=True, ACT_R=act_r,
                PRECISION=precision, UPCAST=False, BP=64, BQ=64, BR=32))
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
    print("compiled for sm_90")


if __name__ == "__main__":
    main()
