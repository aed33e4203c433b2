"""The router after its projection, one program per block of BT token rows over all N experts (fp32):

forward  noisy = s + sigma * noise;  p = softmax(noisy);  (g, idx) = top-k of p (the lowest index first
         among equal values), renormalised to sum to 1 when asked;  eta_k = the k-th largest noisy logit;
         importance partial sums sum_t p_t and load partial sums sum_t Phi((s_t - eta_k,t) / sigma)
         (GMoE App. C.4 eqs. 9-10) per block, summed over the blocks by the caller (no atomics);
backward the same rows: dp = dp_out + d_importance + the top-k scatter of the (renormalisation's) gate
         gradient; d_noisy = p (dp - <dp, p>) + d_noisy_out; the load's phi((s - eta_k) / sigma) / sigma
         flows to s and, negated and summed, to the noisy logit that is eta_k.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def route_forward(S, noise, noisy_out, probs_out, gates_out, idx_out, kth_out, imp_part, load_part,
                  num_rows, num_experts, sigma,
                  K: tl.constexpr, KP: tl.constexpr, RENORM: tl.constexpr, NOISE: tl.constexpr,
                  LOAD: tl.constexpr, BT: tl.constexpr, BE: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BT + tl.arange(0, BT)
    cols = tl.arange(0, BE)
    row_ok, col_ok = rows < num_rows, cols < num_experts
    ok = row_ok[:, None] & col_ok[None, :]
    at = rows[:, None] * num_experts + cols[None, :]
    s = tl.load(S + at, mask=ok, other=0.0)
    noisy = s
    if NOISE:
        noisy = s + sigma * tl.load(noise + at, mask=ok, other=0.0)
    noisy = tl.where(col_ok[None, :], noisy, float("-inf"))
    shifted = noisy - tl.max(noisy, axis=1)[:, None]
    e = tl.exp(shifted)
    p = e / tl.sum(e, axis=1)[:, None]
    tl.store(noisy_out + at, noisy, mask=ok)
    tl.store(probs_out + at, p, mask=ok)
    remaining = tl.where(col_ok[None, :], p, -1.0)
    slots = tl.arange(0, KP)
    top_gates = tl.zeros((BT, KP), dtype=tl.float32)
    top_idx = tl.zeros((BT, KP), dtype=tl.int32)
    for j in tl.static_range(K):
        best = tl.max(remaining, axis=1)
        pos = tl.min(tl.where(remaining == best[:, None], cols[None, :], BE), axis=1)
        top_gates = tl.where(slots[None, :] == j, best[:, None], top_gates)
        top_idx = tl.where(slots[None, :] == j, pos[:, None], top_idx)
        remaining = tl.where(cols[None, :] == pos[:, None], -1.0, remaining)
    if RENORM:
        total = tl.sum(top_gates, axis=1)
        top_gates = top_gates / tl.where(row_ok, total, 1.0)[:, None]
    kept = row_ok[:, None] & (slots[None, :] < K)
    tl.store(gates_out + rows[:, None] * K + slots[None, :], top_gates, mask=kept)
    tl.store(idx_out + rows[:, None] * K + slots[None, :], top_idx.to(tl.int64), mask=kept)
    tl.store(imp_part + pid * num_experts + cols, tl.sum(tl.where(ok, p, 0.0), axis=0), mask=col_ok)
    if LOAD:
        left = noisy
        kth = tl.zeros((BT,), dtype=tl.float32)
        kth_pos = tl.zeros((BT,), dtype=tl.int32)
        for j in tl.static_range(K):
            kth = tl.max(left, axis=1)
            kth_pos = tl.min(tl.where(left == kth[:, None], cols[None, :], BE), axis=1)
            left = tl.where(cols[None, :] == kth_pos[:, None], float("-inf"), left)
        tl.store(kth_out + rows, kth_pos, mask=row_ok)
        z = (kth[:, None] - s) / sigma * 0.7071067811865476
        load = 1.0 - 0.5 * (1.0 + tl.math.erf(z))
        tl.store(load_part + pid * num_experts + cols, tl.sum(tl.where(ok, load, 0.0), axis=0), mask=col_ok)


@triton.jit
def route_backward(S, noisy_in, probs_in, gates_in, idx_in, kth_in, d_noisy_out, d_probs_out, d_gates, d_imp, d_load,
                   d_s, num_rows, num_experts, sigma,
                   K: tl.constexpr, RENORM: tl.constexpr, LOAD: tl.constexpr, BT: tl.constexpr, BE: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BT + tl.arange(0, BT)
    cols = tl.arange(0, BE)
    row_ok, col_ok = rows < num_rows, cols < num_experts
    ok = row_ok[:, None] & col_ok[None, :]
    at = rows[:, None] * num_experts + cols[None, :]
    p = tl.load(probs_in + at, mask=ok, other=0.0)
    dp = tl.load(d_probs_out + at, mask=ok, other=0.0) + tl.load(d_imp + cols, mask=col_ok, other=0.0)[None, :]
    dot = tl.zeros((BT,), dtype=tl.float32)
    if RENORM:  # g_j = r_j / sum r: dr_j = (dg_j - sum_i dg_i g_i) / sum r, with r the top-k probabilities
        raw_total = tl.zeros((BT,), dtype=tl.float32)
        for j in tl.static_range(K):
            pos = tl.load(idx_in + rows * K + j, mask=row_ok, other=0)
            raw_total += tl.sum(tl.where(cols[None, :] == pos[:, None], p, 0.0), axis=1)
            dot += tl.load(d_gates + rows * K + j, mask=row_ok, other=0.0) * tl.load(gates_in + rows * K + j,
                                                                                    mask=row_ok, other=0.0)
    for j in tl.static_range(K):
        pos = tl.load(idx_in + rows * K + j, mask=row_ok, other=0)
        dg = tl.load(d_gates + rows * K + j, mask=row_ok, other=0.0)
        if RENORM:
            dg = (dg - dot) / tl.where(row_ok, raw_total, 1.0)
        dp += tl.where(cols[None, :] == pos[:, None], dg[:, None], 0.0)
    ds = p * (dp - tl.sum(dp * p, axis=1)[:, None]) + tl.load(d_noisy_out + at, mask=ok, other=0.0)
    if LOAD:
        s = tl.load(S + at, mask=ok, other=0.0)
        kth_pos = tl.load(kth_in + rows, mask=row_ok, other=0)
        kth = tl.sum(tl.where(cols[None, :] == kth_pos[:, None], tl.load(noisy_in + at, mask=ok, other=0.0), 0.0),
                     axis=1)
        z = (kth[:, None] - s) / sigma
        flow = tl.load(d_load + cols, mask=col_ok, other=0.0)[None, :] * 0.3989422804014327 * tl.exp(-0.5 * z * z)
        flow = tl.where(ok, flow / sigma, 0.0)
        ds += flow
        ds -= tl.where(cols[None, :] == kth_pos[:, None], tl.sum(flow, axis=1)[:, None], 0.0)
    tl.store(d_s + at, ds, mask=ok)
