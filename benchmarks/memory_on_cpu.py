"""A GPU training step's peak memory, estimated on the CPU: `dgmoe bench memory`'s CPU measurement (the peak of
live tensor bytes over a second bf16 step, torch's MemTracker) with the dispatch a GPU runs (the sync-free
grouped GEMM, which the CPU otherwise replaces by its sorted loop), so that the tensors kept for the backward
are the GPU's. Each model in a fresh process; ratios to the first model. Against `max_memory_allocated` on an
H200 (docs/benchmarks.md, section 12) these estimates were within 0.015 of the measured ratios. A diagnostic,
not a test; at batch 96 and 224 px it takes about a minute per model on two cores:

    PYTHONPATH=src python benchmarks/memory_on_cpu.py vit_small_patch16_224 gmoe_small_patch16_224 [--batch-size 96]
"""
import argparse
import json
import subprocess
import sys

CHILD = """
import json, sys, torch
import dgmoe.moe.dispatch as dispatch
dispatch.fused_grouped_gemm = lambda device, dtype: dtype == torch.bfloat16  # the GPU's dispatch, on the CPU
from dgmoe.bench.config import ModelBenchConfig
from dgmoe.bench.models import _measure_memory_child
cfg = ModelBenchConfig(batch_size=int(sys.argv[2]), device="cpu", precision="bf16")
print(json.dumps(_measure_memory_child(sys.argv[1], cfg)))
"""

parser = argparse.ArgumentParser()
parser.add_argument("models", nargs="+")
parser.add_argument("--batch-size", type=int, default=96)
args = parser.parse_args()
print(f"| model | peak (GB, live tensors, bf16, batch {args.batch_size}) | of which weights, grads, Adam | x first |")
print("| --- | --- | --- | --- |")
reference = None
for name in args.models:
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(args.batch_size)], check=True, capture_output=True,
                         text=True).stdout
    peak = json.loads(out.strip().splitlines()[-1])
    reference = reference or peak["total"]
    print(f"| {name} | {peak['total']:.3f} | {peak['states']:.3f} | {peak['total'] / reference:.3f} |", flush=True)
