"""On a CUDA device (marked gpu, TRITON_INTERPRET=0): a sparse layer compiled by inductor in fp32 takes the Triton
experts' custom operators (the chooser's compiled fp32 path), matches the eager layer, and makes no host sync
once each shape's tiles are tuned (`torch.cuda.set_sync_debug_mode("error")`)."""
import os

import pytest
import torch

from dgmoe.moe import MoEConfig, MoEMlp
from dgmoe.moe import dispatch as dispatch_module
from dgmoe.moe import layer as layer_module

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                 reason="run with TRITON_INTERPRET=0 to compile the kernels")]
pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]')")


def _step(layer, forward, x):
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    y = forward(x)
    loss = (y * torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)).sum()
    (loss + sum(layer.aux_losses().values())).backward()
    layer.clear_aux()
    return [y.detach(), x.grad] + [p.grad for p in layer.parameters()]


def test_the_compiled_fp32_layer_runs_the_triton_operators_without_host_syncs(monkeypatch):
    chosen: list[tuple[bool, str]] = []  # (compiling, path) of every choice

    def choose(device_type, dtype, compiling, needs):
        path = dispatch_module.choose_path(device_type, dtype, compiling, needs)
        chosen.append((compiling, path))
        return path
    monkeypatch.setattr(layer_module, "choose_path", choose)
    torch.manual_seed(0)
    layer = MoEMlp(64, 256, MoEConfig(num_experts=6, top_k=2, noise_std=0.0)).cuda().train()
    x = torch.randn(4, 50, 64, device="cuda")
    eager = _step(layer, layer, x)
    compiled_layer = torch.compile(layer, fullgraph=True)
    compiled = _step(layer, compiled_layer, x)  # compiles and tunes the tiles of this shape
    assert (True, "triton") in chosen and (False, "triton") in chosen
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _step(layer, compiled_layer, x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
