"""Where a model's bf16 train step spends its time on a GPU: torch.profiler over a few back-to-back steps of
`dgmoe bench models`' own step (forward, auxiliary losses, backward, Adam), printed as the top operators by
self device time and by self CPU time, and the host synchronisations counted (cudaStreamSynchronize,
cudaDeviceSynchronize, device-to-host copies). A diagnostic for docs/benchmarks.md section 12, not a test:

    PYTHONPATH=src python benchmarks/profile_step.py gmoe_small_patch16_224 [--compile]
"""
import argparse

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
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            train_step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    syncs = {e.key: e.count for e in events
             if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "aten::item",
                          "aten::_local_scalar_dense", "aten::nonzero")}
    print(f"== {name}{' compiled' if args.compile else ''}: 5 train steps, batch {args.batch_size}; "
          f"calls that may sync: {syncs}")
    print(events.table(sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60))
