"""torchrun with 2 CPU processes (gloo) trains on the same global batch as one process."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file


def _train(out, nproc, model="vit_micro_patch7_28", model_kwargs='{"depth": 2}'):
    args = ["-m", "dgmoe", "train", "--dataset", "RotatedMNIST", "--model", model, "--model-kwargs", model_kwargs, "--steps", "4", "--checkpoint-freq", "2", "--n-per-domain", "40", "--num-threads", "1",
            "--output-dir", str(out), "--progress", "none"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        cmd = [sys.executable, *args]
    else:
        torchrun = shutil.which("torchrun") or pytest.skip("torchrun is not on PATH")
        cmd = [torchrun, "--standalone", "--nproc_per_node", str(nproc), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_two_processes_match_one_process(tmp_path):
    one = _train(tmp_path / "one", 1)
    two = _train(tmp_path / "two", 2)
    assert [r["step"] for r in one] == [r["step"] for r in two]
    for a, b in zip(one, two):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-4)
        for key in a:
            if key.endswith("_acc"):
                assert a[key] == pytest.approx(b[key], abs=1e-6), key
    wa, wb = load_file(str(tmp_path / "one" / "model.safetensors")), load_file(str(tmp_path / "two" / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-4, rtol=1e-3)
    # only rank 0 writes: one results file, no stray files from rank 1
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


@pytest.mark.slow
def test_two_processes_train_a_gmoe(tmp_path):
    records = _train(tmp_path / "gmoe", 2, model="gmoe_micro_patch7_28", model_kwargs='{"depth": 2, "moe_layers": [1]}')
    assert all(r["loss"] == r["loss"] for r in records)  # finite, not NaN
