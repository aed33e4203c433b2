"""A run killed with SIGKILL and started again ends exactly as an uninterrupted run (never lose a run)."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from run_records import comparable_records
from safetensors.torch import load_file


def _cmd(out, steps=16):
    return [sys.executable, "-m", "dgmoe", "train", "--dataset", "RotatedMNIST", "--model", "gmoe_micro_patch7_28",
            "--model-kwargs", '{"depth": 2, "moe_layers": [1]}', "--test-envs", "0", "--steps", str(steps),
            "--checkpoint-freq", "3", "--n-per-domain", "60", "--num-threads", "1", "--seed", "3",
            "--output-dir", str(out), "--progress", "lines"]


@pytest.mark.slow  # ~20 s: CI runs it with -m slow
def test_sigkill_then_resume_gives_identical_records_and_weights(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    subprocess.run(_cmd(ref), check=True, env=env, capture_output=True)
    proc = subprocess.Popen(_cmd(killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        results = killed / "results.jsonl"
        if results.exists() and len(results.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "done").exists(), "the run finished before it could be killed"
    resumed = subprocess.run(_cmd(killed), check=True, env=env, capture_output=True, text=True)
    assert "resuming" in resumed.stderr
    assert comparable_records(killed) == comparable_records(ref)
    for name in ("model.safetensors", "best.safetensors"):
        a, b = load_file(str(ref / name)), load_file(str(killed / name))
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), name
    # a finished run is not re-run
    again = subprocess.run(_cmd(killed), check=True, env=env, capture_output=True, text=True)
    assert (again.stdout + again.stderr).count("nothing to do") == 1  # said once (the run's log line)
    assert len(comparable_records(killed)) == len(comparable_records(ref))


def test_output_dir_holding_a_different_run_is_refused(tmp_path):
    from dgmoe.engine.config import RunConfig
    from dgmoe.engine.trainer import RunMismatchError, train

    base = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, steps=1,
                checkpoint_freq=1, n_per_domain=20, output_dir=str(tmp_path / "run"), progress="none")
    train(RunConfig.from_flat(**base))
    before = (tmp_path / "run" / "results.jsonl").read_text()
    with pytest.raises(RunMismatchError, match="differs in: seed"):
        train(RunConfig.from_flat(**{**base, "seed": 5}))
    assert (tmp_path / "run" / "results.jsonl").read_text() == before
