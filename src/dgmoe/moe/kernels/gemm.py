"""The two grouped-GEMM kernels every expert pass is made of, over the A = T*k assignments sorted by expert
(`dgmoe.moe.sync_free.expert_permutation`: stable, so each expert's rows are contiguous).

`grouped_rows` computes out[r] = epilogue(X[src(r)] @ W_e(r) (+ b_e(r))) for every sorted row r: a program
owns BM sorted rows and BN output columns and loops over the experts its rows belong to (one, except in the
at most N-1 blocks that straddle two experts), so its grid (ceil(A / BM), ceil(cols / BN)) is fixed by the
shapes and the expert of each row is read on the device. Prologue: rows gathered by an index (`src` = the
sorted token index: the gather-GEMM of ScatterMoE, Tan et al. 2024). Epilogue, in fp32: the bias, the
pre-activation stored for the backward, the activation (GELU, erf form, or QuickGELU) or the activation's
derivative times the input (backward), a per-row scale (the gate), and a scatter of each row to a given
output row (the un-permuted (token, choice) slot: the GEMM-scatter).

`grouped_weight_grad` computes dW_e = L_e^T R_e and optionally db_e = sum of L_e's rows, over expert e's
segment of sorted rows, with L and R optionally gathered by the token index, L scaled per row and R passed
through the activation as it is loaded (so the backward needs the pre-activation only): one program
per (expert, BP x BQ tile), the loop over the segment's rows bounded by the device offsets (`num_rows`, the
T*k assignments, is not read: it keys the autotuned launch of `tiles.py`). Both accumulate in
fp32; fp32 inputs multiply in IEEE fp32 unless `PRECISION` is "tf32". `UPCAST` converts 16-bit operands to
fp32 before `tl.dot`: Triton's interpreter multiplies bf16 tiles as their raw uint16 bits (triton 3.9), and
the product of two bf16 (or fp16) numbers is exact in fp32, so the upcast dot is the tensor-core dot's value
(fp32 accumulation); on a GPU it stays off.
"""
from __future__ import annotations

import triton
import triton.language as tl

ACT_NONE, ACT_GELU, ACT_QUICK_GELU = 0, 1, 2
ACT_CODES = {"gelu": ACT_GELU, "quick_gelu": ACT_QUICK_GELU}


@triton.jit
def _activation(v, ACT: tl.constexpr):
    if ACT == 1:  # GELU, erf form (Hendrycks & Gimpel 2016), as torch.nn.functional.gelu
        v = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    elif ACT == 2:  # QuickGELU, x * sigmoid(1.702 x)
        v = v * tl.sigmoid(1.702 * v)
    return v


@triton.jit
def _activation_grad(z, ACT: tl.constexpr):
    if ACT == 1:  # Phi(z) + z phi(z)
        d = 0.5 * (1.0 + tl.math.erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)
    else:  # s + 1.702 z s (1 - s), s = sigmoid(1.702 z)
        s = tl.sigmoid(1.702 * z)
        d = s + 1.702 * z * s * (1.0 - s)
    return d


@triton.jit
def grouped_rows(X, src_index, expert_sorted, W, bias, scale, Z, pre_out, out, out_index,
                 num_rows, K, cols_out, stride_x, stride_we, stride_wk, stride_wn,
                 GATHER: tl.constexpr, SCATTER: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr,
                 STORE_PRE: tl.constexpr, ACT: tl.constexpr, ACT_GRAD: tl.constexpr, PRECISION: tl.constexpr,
                 UPCAST: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)  # 64-bit offsets: rows x columns may pass 2^31
    row_ok = rows < num_rows
    cols = pid_n * BN + tl.arange(0, BN)
    col_ok = cols < cols_out
    ok = row_ok[:, None] & col_ok[None, :]
    expert_of_row = tl.load(expert_sorted + rows, mask=row_ok, other=-1)
    first_expert = tl.load(expert_sorted + pid_m * BM)
    last_expert = tl.load(expert_sorted + tl.minimum(pid_m * BM + BM, num_rows) - 1)
    if GATHER:
        src = tl.load(src_index + rows, mask=row_ok, other=0)
    else:
        src = rows
    result = tl.zeros((BM, BN), dtype=tl.float32)
    for e in range(first_expert, last_expert + 1):
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            k_ok = ks < K
            a = tl.load(X + src[:, None] * stride_x + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(W + e * stride_we + ks[:, None] * stride_wk + cols[None, :] * stride_wn,
                        mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            if UPCAST:
                a, w = a.to(tl.float32), w.to(tl.float32)
            acc = tl.dot(a, w, acc, input_precision=PRECISION)
        if HAS_BIAS:
            acc += tl.load(bias + e * cols_out + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        result = tl.where((expert_of_row == e)[:, None], acc, result)
    if STORE_PRE:
        tl.store(pre_out + rows[:, None] * cols_out + cols[None, :], result.to(pre_out.dtype.element_ty), mask=ok)
    if ACT != 0:
        result = _activation(result, ACT)
    if ACT_GRAD != 0:
        z = tl.load(Z + rows[:, None] * cols_out + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        result = result * _activation_grad(z, ACT_GRAD)
    if HAS_SCALE:
        result = result * tl.load(scale + rows, mask=row_ok, other=0.0).to(tl.float32)[:, None]
    if SCATTER:
        dst = tl.load(out_index + rows, mask=row_ok, other=0)
    else:
        dst = rows
    tl.store(out + dst[:, None] * cols_out + cols[None, :], result.to(out.dtype.element_ty), mask=ok)


@triton.jit
def grouped_weight_grad(L, R, row_index, scale, offsets, dW, db, P, Q, num_rows,
                        GATHER_L: tl.constexpr, GATHER_R: tl.constexpr, HAS_SCALE: tl.constexpr,
                        HAS_DB: tl.constexpr, ACT_R: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                        BP: tl.constexpr, BQ: tl.constexpr, BR: tl.constexpr):
    e, pid_p, pid_q = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(offsets + e - 1, mask=e > 0, other=0).to(tl.int32)
    end = tl.load(offsets + e).to(tl.int32)
    ps = pid_p * BP + tl.arange(0, BP)
    qs = pid_q * BQ + tl.arange(0, BQ)
    p_ok, q_ok = ps < P, qs < Q
    acc = tl.zeros((BP, BQ), dtype=tl.float32)
    acc_b = tl.zeros((BP,), dtype=tl.float32)
    for r0 in range(start, end, BR):
        rs = (r0 + tl.arange(0, BR)).to(tl.int64)
        r_ok = rs < end
        token = tl.load(row_index + rs, mask=r_ok, other=0)
        if GATHER_L:
            li = token
        else:
            li = rs
        if GATHER_R:
            ri = token
        else:
            ri = rs
        left = tl.load(L + li[:, None] * P + ps[None, :], mask=r_ok[:, None] & p_ok[None, :], other=0.0)
        if HAS_SCALE:
            s = tl.load(scale + rs, mask=r_ok, other=0.0).to(tl.float32)
            left = (left.to(tl.float32) * s[:, None]).to(L.dtype.element_ty)
        right = tl.load(R + ri[:, None] * Q + qs[None, :], mask=r_ok[:, None] & q_ok[None, :], other=0.0)
        if ACT_R != 0:  # R holds pre-activations: the activation applied as it is loaded (prologue)
            right = _activation(right.to(tl.float32), ACT_R).to(R.dtype.element_ty)
        if UPCAST:
            left, right = left.to(tl.float32), right.to(tl.float32)
        acc = tl.dot(tl.trans(left), right, acc, input_precision=PRECISION)
        if HAS_DB:
            acc_b += tl.sum(left.to(tl.float32), axis=0)
    tl.store(dW + e * P * Q + ps[:, None] * Q + qs[None, :], acc, mask=p_ok[:, None] & q_ok[None, :])
    if HAS_DB:
        if pid_q == 0:
            tl.store(db + e * P + ps, acc_b, mask=p_ok)
