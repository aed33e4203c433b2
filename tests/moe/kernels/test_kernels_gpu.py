"""The Triton kernels compiled for a CUDA device (run with TRITON_INTERPRET=0, marked gpu): the experts
against the float64 mask loop in fp32, TF32 and bf16, and 0 host syncs in the forward and backward of the
fixed-shape dispatch, the Triton dispatch and the fused router (`torch.cuda.set_sync_debug_mode("error")`)."""
import copy
import os

import pytest
import torch
from expert_bounds import BF16_STORES, expert_roundings, rounded_double
from roundoff import assert_within_gamma

from dgmoe.moe.dispatch import masked_dispatch
from dgmoe.moe.experts import Experts
from dgmoe.moe.fixed_shape import fixed_shape_dispatch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                 reason="run with TRITON_INTERPRET=0 to compile the kernels")]
triton = pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]')")


def _case(device, tokens=300, dim=64, hidden=256, num_experts=6, k=2):
    torch.manual_seed(0)
    experts = Experts(num_experts, dim, hidden).to(device)
    with torch.no_grad():
        experts.fc1_weight.normal_(0, dim ** -0.5), experts.fc2_weight.normal_(0, hidden ** -0.5)
        experts.fc1_bias.normal_(), experts.fc2_bias.normal_()
    idx = torch.stack([torch.randperm(num_experts)[:k] for _ in range(tokens)]).to(device)
    return experts, torch.randn(tokens, dim, device=device), idx, torch.rand(tokens, k, device=device)


@pytest.mark.parametrize("mode", ["fp32", "tf32", "bf16"])
def test_compiled_triton_experts_match_the_mask_loop(mode):
    from dgmoe.moe.kernels import expert_dispatch
    experts, x, idx, gates = _case("cuda")
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
        got = expert_dispatch(x, idx, gates, experts, allow_tf32=mode == "tf32")
    on_cpu = copy.deepcopy(experts).cpu()
    xd, idx, gd = x.to(dtype).double().cpu(), idx.cpu(), gates.double().cpu()
    ref = masked_dispatch(xd, idx, gd, rounded_double(on_cpu, dtype))
    magnitude = masked_dispatch(xd.abs(), idx, gd.abs(), rounded_double(on_cpu, dtype, absolute=True))
    # worst case (tests/moe/kernels/roundoff.py): fp32 sums; TF32 rounds the 4 operands of the forward chain's 2
    # GEMMs to fp16's 10-bit mantissa (unit roundoff 2^-11); bf16 stores intermediates
    stored, stored_dtype = {"fp32": (0, torch.float32), "tf32": (4, torch.float16),
                            "bf16": (BF16_STORES, torch.bfloat16)}[mode]
    n = expert_roundings(on_cpu, x.shape[0], 2, backward=False)
    assert_within_gamma(got.cpu(), ref, magnitude, n, "out", stored, stored_dtype)


def test_no_host_syncs_in_the_fp32_cuda_paths():
    from dgmoe.moe.kernels import expert_dispatch, fused_route
    experts, x, idx, gates = _case("cuda")
    x.requires_grad_(True)
    logits = torch.randn(300, 6, device="cuda", requires_grad=True)
    noise = torch.randn(300, 6, device="cuda")
    for dispatch in (fixed_shape_dispatch, expert_dispatch):  # compile and warm up outside the check
        dispatch(x, idx, gates, experts).sum().backward()
    fused_route(logits, 2, noise, 1 / 6).gates.sum().backward()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for dispatch in (fixed_shape_dispatch, expert_dispatch):
            dispatch(x, idx, gates, experts).sum().backward()
        r = fused_route(logits, 2, noise, 1 / 6)
        (r.gates.sum() + r.balance_loss()).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
