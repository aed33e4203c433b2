"""Is a GPU path bound by the host (Python, autograd and kernel launches) or by the device? For each
candidate of `dgmoe bench layer` (at its shape) and the train step of `dgmoe bench models`, times N
back-to-back calls three ways: the host's time to enqueue them (before any synchronisation), the device's
time between CUDA events around them, and the wall time to the final synchronisation. Host >= device
means the GPU waits for Python: fusing (torch.compile) or fewer, larger kernels help, faster kernels do not.
A diagnostic for docs/benchmarks.md section 12, not a test:

    PYTHONPATH=src python benchmarks/host_vs_device.py
"""
import time
from functools import partial

import torch

from dgmoe.bench.layer import (LIMIT, ROUTER, LayerBenchConfig, Mlp, _dispatch_only, _fwd_bwd, _moe_layer,
                               _router_only)
from dgmoe.bench.models import ModelBenchConfig, _build, _steps


def measure(name: str, fn, calls: int = 20) -> None:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    device = start.elapsed_time(end) / 1e3
    bound = "host" if host >= 0.9 * device else "device"
    print(f"| {name:32s} | {1e3 * host / calls:8.3f} | {1e3 * device / calls:8.3f} | {1e3 * wall / calls:8.3f} "
          f"| {bound:6s} |", flush=True)


cfg = LayerBenchConfig(tokens=96 * 197, device="cuda", precision="bf16")
amp = partial(torch.autocast, "cuda", dtype=torch.bfloat16)
torch.manual_seed(0)
x = torch.randn(cfg.tokens, cfg.dim, device="cuda", requires_grad=True)
x_k = torch.randn(cfg.tokens * cfg.top_k, cfg.dim, device="cuda", requires_grad=True)
print("| call (fwd+bwd, bf16)             | host ms  | device ms | wall ms | bound  |")
print("| --- | --- | --- | --- | --- |")
measure(LIMIT, _fwd_bwd(Mlp(cfg.dim, 4 * cfg.dim).cuda(), x_k, amp))
measure("moe grouped (default)", _fwd_bwd(_moe_layer("moe grouped (default)", cfg).cuda().train(), x, amp))
measure(ROUTER, _router_only(_moe_layer("moe grouped (default)", cfg).cuda().train(), x, amp))
measure("dispatch sync-free grouped_mm", _dispatch_only("dispatch sync-free grouped_mm", cfg, x, amp))
for model in ("vit_small_patch16_224", "gmoe_small_patch16_224", "sfmoe_small_patch16_224", "moge_small_patch16_224"):
    mcfg = ModelBenchConfig(models=(model,), batch_size=96, device="cuda", precision="bf16")
    train_step, infer = _steps(_build(model, mcfg), mcfg)
    measure(f"{model} train step", train_step, calls=10)
    measure(f"{model} inference", infer, calls=10)
