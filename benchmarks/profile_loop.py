"""Where `dgmoe train`'s step loop spends its time on a GPU: the loop of `dgmoe bench data` (the trainer's
loader, moved to the device, and the update) profiled over a few steps, printed as how busy the GPU is (the
kernels' summed time over the wall time of the same steps unprofiled: near 100% the loop is at the model's
speed), the top operators by self CPU time, and every place that synchronised with the device during three
steps (`torch.cuda.set_sync_debug_mode("warn")`, with the Python stack of each). A diagnostic for
docs/benchmarks.md section 12, not a test:

    PYTHONPATH=src python benchmarks/profile_loop.py --dataset PACS --data-dir DIR --model gmoe_small_patch16_224 \
        --workers 0
"""
import argparse
import collections
import time
import traceback
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from dgmoe.engine.config import RunConfig
from dgmoe.engine.setup import prepare_run

parser = argparse.ArgumentParser()
parser.add_argument("--dataset", default="PACS")
parser.add_argument("--data-dir", required=True)
parser.add_argument("--model", default="gmoe_small_patch16_224")
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--rows", type=int, default=15)
parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the script")
parser.add_argument("--n-per-domain", type=int, default=None, help="fewer images per domain (to try the script)")
args = parser.parse_args()
cuda = args.device.startswith("cuda")
sync = torch.cuda.synchronize if cuda else (lambda: None)

run = RunConfig.from_flat(dict(dataset=args.dataset, data_dir=args.data_dir, model=args.model, device=args.device,
                               precision="bf16", test_envs=(0,), n_per_domain=args.n_per_domain,
                               output_dir="/tmp/unused"))
setup = prepare_run(run)
algorithm = setup.algorithm.to(args.device).train()
stream = setup.train_batches().iter_from(0, None, args.workers, pin_memory=setup.on_gpu)
step = 0


def steps(n: int) -> None:
    global step
    with setup.autocast():
        for _ in range(n):
            algorithm.update([b.to(args.device) for b in next(stream)], step)
            step += 1


steps(5)
sync()
start = time.perf_counter()
steps(args.steps)
sync()
wall = time.perf_counter() - start
with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
    steps(args.steps)
    sync()
events = prof.key_averages()
kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
busy = sum(e.self_device_time_total for e in kernels) / 1e6
images = setup.hparams["batch_size"] * len(setup.train_envs)
print(f"== {args.model}, {args.workers} workers: {1e3 * wall / args.steps:.2f} ms per step "
      f"({images * args.steps / wall:.0f} img/s); GPU busy {100 * busy / wall:.0f}% of the wall time "
      "(kernels of both streams summed: above 100% where they overlap)")
print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60))

sites: collections.Counter = collections.Counter()


def note(message, category, filename, lineno, file=None, line=None):
    frames = [f for f in traceback.extract_stack()[:-1] if "warnings" not in f.filename]
    sites["\n".join(f"    {f.filename}:{f.lineno} {f.name}" for f in frames[-6:])] += 1


warnings.showwarning = note
warnings.simplefilter("always")
if cuda:
    torch.cuda.set_sync_debug_mode("warn")
steps(3)
if cuda:
    torch.cuda.set_sync_debug_mode("default")
print(f"== synchronisations during 3 steps (main thread; the loader's thread raises on its own): "
      f"{sum(sites.values())}")
for where, count in sites.most_common():
    print(f"  {count} x\n{where}")
stream.close()
