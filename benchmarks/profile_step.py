"""Where a model's bf16 train step spends its time on a GPU: torch.profiler over a few back-to-back steps of
`dgmoe bench models`' own step (forward, auxiliary losses, backward, Adam), printed as the top operators by
self device time and by self CPU time, the host synchronisations counted (cudaStreamSynchronize,
cudaDeviceSynchronize, device-to-host copies), and how busy the GPU is: the kernels' summed time over the wall
time of the same 5 steps run without the profiler (near 100%: the device is the limit, and only fewer or
faster kernels help; well below: the GPU waits for the host, and fusing, e.g. torch.compile, helps).
A diagnostic for docs/benchmarks.md section 12, not a test:

    PYTHONPATH=src python benchmarks/profile_step.py gmoe_small_patch16_224 [--compile]
"""
import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from dgmoe.bench.models import ModelBenchConfig, _build, _steps

parser = argparse.ArgumentParser()
parser.add_argument("models", nargs="+")
parser.add_argument("--batch-size", type=int, default=96)
parser.add_argument("--compile", action="store_true")
parser.add_argument("--rows", type=int, default=18)
args = parser.parse_args()
for name in args.models:
    cfg = ModelBenchConfig(models=(name,), batch_size=args.batch_size, device="cuda", precision="bf16",
                           compile=args.compile)
    train_step, _ = _steps(_build(name, cfg), cfg)
    for _ in range(5):
        train_step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        train_step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            train_step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    syncs = {e.key: e.count for e in events
             if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "aten::item",
                          "aten::_local_scalar_dense", "aten::nonzero")}
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]  # not the ops launching them
    busy = sum(e.self_device_time_total for e in kernels) / 1e6  # microseconds -> seconds
    print(f"== {name}{' compiled' if args.compile else ''}: 5 train steps, batch {args.batch_size}, "
          f"{1e3 * wall / 5:.2f} ms per step; GPU busy {100 * busy / wall:.0f}% of the wall time; "
          f"calls that may sync: {syncs}")
    print(events.table(sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60))
