"""Where the MoE layer's time goes on a GPU: each part `dgmoe bench layer` times (the layer as a model runs
it, the router alone, the sync-free dispatch alone, and the layer compiled), profiled over back-to-back calls
at ViT-S dims: wall time per call, kernels launched per call, how busy the GPU is (kernel time over wall
time: well below 100%, the host is the limit) and the top kernels by device time. A diagnostic for
docs/benchmarks.md section 12, not a test:

    PYTHONPATH=src python benchmarks/profile_layer.py [--tokens 18912]
"""
import argparse
import time
from functools import partial

import torch
from torch.profiler import ProfilerActivity, profile

from dgmoe.bench.layer import COMPILED, LayerBenchConfig, _dispatch_only, _fwd_bwd, _moe_layer, _router_only
from dgmoe.models.layers import Mlp

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=18912)
parser.add_argument("--calls", type=int, default=10)
parser.add_argument("--rows", type=int, default=12)
parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the script")
args = parser.parse_args()
dev = torch.device(args.device)
cuda = dev.type == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)
cfg = LayerBenchConfig(tokens=args.tokens, device=args.device, precision="bf16")
amp = partial(torch.autocast, dev.type, dtype=torch.bfloat16)
x = torch.randn(cfg.tokens, cfg.dim, device=dev, requires_grad=True)
x_k = torch.randn(cfg.tokens * cfg.top_k, cfg.dim, device=dev, requires_grad=True)


def layer(compiled: bool):
    return _fwd_bwd(_moe_layer("moe grouped (default)", cfg).to(dev).train(), x, amp, compiled=compiled)

parts = {"limit (k dense FFNs)": _fwd_bwd(Mlp(cfg.dim, 4 * cfg.dim).to(dev), x_k, amp),
         "moe grouped (default)": layer(False), COMPILED: layer(True),
         "router alone": _router_only(_moe_layer("moe grouped (default)", cfg).to(dev).train(), x, amp),
         "dispatch sync-free grouped_mm": _dispatch_only("dispatch sync-free grouped_mm", cfg, x, amp)}
for name, run in parts.items():
    for _ in range(5):
        run()
    sync()
    start = time.perf_counter()
    for _ in range(args.calls):
        run()
    sync()
    wall = (time.perf_counter() - start) / args.calls
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(args.calls):
            run()
        sync()
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in kernels) / 1e6 / args.calls
    launched = sum(e.count for e in kernels) / args.calls
    print(f"== {name}: {1e3 * wall:.3f} ms per call, {launched:.0f} kernels per call, kernel time "
          f"{1e3 * busy:.3f} ms ({100 * busy / wall:.0f}% of the wall time)")
    print(events.table(sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=70))
