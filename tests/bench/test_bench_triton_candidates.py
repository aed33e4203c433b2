"""The Triton candidates of `dgmoe bench layer` (autotuned tiles, fixed tiles, compiled): offered only on CUDA
with triton (the interpreter would time Python, not kernels), and their code runs at tiny sizes on the CPU under
Triton's interpreter, in a process of its own (the interpreter is chosen when the kernels are imported)."""
import json
import os
import subprocess
import sys

import pytest

from dgmoe.bench import layer as bench_layer
from dgmoe.bench.layer import COMPILED_CANDIDATES, TRITON_CANDIDATES, available_candidates


def test_the_triton_candidates_are_offered_on_cuda_with_triton_only(monkeypatch):
    assert not set(TRITON_CANDIDATES) & set(available_candidates("cpu"))
    monkeypatch.setattr(bench_layer.kernels, "available", lambda: True)
    assert set(TRITON_CANDIDATES) <= set(available_candidates("cuda"))
    assert not set(TRITON_CANDIDATES) & set(available_candidates("cpu"))
    monkeypatch.setattr(bench_layer.kernels, "available", lambda: False)
    assert not set(TRITON_CANDIDATES) & set(available_candidates("cuda"))
    # the compiled padded path, the other side of the compiled fp32 choice, runs anywhere
    assert "moe fixed-shape padded compiled" in available_candidates("cpu")


_SCRIPT = """
import functools, json, sys
import torch
torch.compile = functools.partial(torch.compile, backend="aot_eager")  # no code generation on this CPU
from dgmoe.bench.layer import LIMIT, LayerBenchConfig, bench_moe_layer
from dgmoe.bench.timing import MIN_ROUNDS
cfg = LayerBenchConfig(tokens=24, dim=16, experts=4, rounds=MIN_ROUNDS)
print(json.dumps({c: {n: r["operations"] for n, r in bench_moe_layer(cfg, c).items()} for c in sys.argv[1:]}))
"""


@pytest.mark.slow  # ~100 s on a loaded 2-core CPU: CI runs it with -m slow
def test_the_triton_candidates_run_at_tiny_sizes_under_the_interpreter():
    pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]')")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, *TRITON_CANDIDATES], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    operations = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(operations) == set(TRITON_CANDIDATES)
    for candidate, counts in operations.items():
        assert counts[bench_layer.LIMIT] > 0
        assert (counts[candidate] is None) == (candidate in COMPILED_CANDIDATES)
