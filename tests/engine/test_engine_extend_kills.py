"""`--extend` is a transaction: killed at any of its writes, re-running the same command ends with the records
and weights of the uninterrupted extension, and the folder never claims `done` at the longer schedule early.

Every file a run writes goes through `RunWriter._write`; the kill is an exception nothing in the engine
handles, raised just before a write, just after it, or in the middle of it (a temporary file left behind, as
SIGKILL would leave it). `test_engine_resume.py` shows a real SIGKILL leaves such folders; the slow test here
kills a real `dgmoe train --extend` process at random times.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from run_records import comparable_records
from safetensors.torch import load_file

from dgmoe.engine.rundir import RunWriter, read_done
from dgmoe.engine.trainer import train

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            checkpoint_freq=2, num_threads=1, progress="none", seed=2)
SHORT, LONG = 6, 10
OPENING = 2  # the writes that turn the finished run into a longer one (remove `done`, rewrite config.json)
TRIES = 12  # the opening writes' kill points, then points drawn with a fixed seed; the slow test tries all


class Killed(BaseException):
    """Stands for SIGKILL: nothing in the engine handles it."""


def _extend(out):
    return train(steps=LONG, extend=True, output_dir=str(out), **TINY)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A finished short run kept for extension, and its uninterrupted extension (with its number of writes)."""
    root = tmp_path_factory.mktemp("extend")
    train(steps=SHORT, keep_resume=True, output_dir=str(root / "short"), **TINY)
    shutil.copytree(root / "short", root / "reference")
    writes = []
    original = RunWriter._write

    def counting(self, write):
        writes.append(1)
        original(self, write)

    RunWriter._write = counting
    try:
        _extend(root / "reference")
    finally:
        RunWriter._write = original
    return root, len(writes)


def _kill_at(monkeypatch, index: int, when: str):
    calls = []
    original = RunWriter._write

    def killing(self, write):
        calls.append(1)
        if len(calls) - 1 != index:
            return original(self, write)
        if when == "during":
            (self.out / ".results.jsonl.killed.tmp").write_text("half")
            raise Killed
        if when == "before":
            raise Killed
        original(self, write)
        raise Killed

    monkeypatch.setattr(RunWriter, "_write", killing)


def _assert_never_claims_done_early(out):
    done, config = read_done(out), json.loads((out / "config.json").read_text())
    if done is not None:
        assert done["last_step"] == comparable_records(out)[-1]["step"] == config["n_steps"] - 1


def _assert_same_as_reference(out, reference):
    assert comparable_records(out) == comparable_records(reference)
    for name in ("model.safetensors", "best.safetensors"):
        a, b = load_file(str(reference / name)), load_file(str(out / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert read_done(out) == read_done(reference)
    assert (out / "resume.pt").exists() == (reference / "resume.pt").exists()
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]


def _one_try(root, monkeypatch, index, when, name):
    out = root / name
    shutil.copytree(root / "short", out)
    with monkeypatch.context() as patch:
        _kill_at(patch, index, when)
        with pytest.raises(Killed):
            _extend(out)
    _assert_never_claims_done_early(out)
    _extend(out)  # (a kill after its `done` leaves it finished: this re-run only tidies up)
    _assert_same_as_reference(out, root / "reference")
    again = _extend(out)  # and the next re-run has nothing left to do
    assert again.already_done


def _points(n_writes):
    return [(i, when) for i in range(n_writes) for when in ("before", "during", "after")]


def test_extend_killed_at_random_write_points_ends_as_the_uninterrupted_extension(runs, monkeypatch):
    root, n_writes = runs
    assert n_writes >= 8  # done removed, config.json, then records/weights/resume state per checkpoint, done
    opening = _points(OPENING)
    drawn = random.Random(27).sample(_points(n_writes)[len(opening):], TRIES - len(opening))
    for k, (index, when) in enumerate(opening + drawn):
        _one_try(root, monkeypatch, index, when, f"try{k}")


@pytest.mark.slow
def test_extend_killed_at_every_write_point(runs, monkeypatch):
    root, n_writes = runs
    for k, (index, when) in enumerate(_points(n_writes)):
        _one_try(root, monkeypatch, index, when, f"every{k}")


@pytest.mark.slow
def test_extend_process_sigkilled_at_random_times(runs):
    root, _ = runs
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "dgmoe", "train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28",
           "--model-kwargs", '{"depth": 1}', "--n-per-domain", "20", "--checkpoint-freq", "2", "--num-threads", "1",
           "--seed", "2", "--progress", "none", "--steps", str(LONG), "--extend"]
    rng = random.Random(0)
    for k in range(10):
        out = root / f"sigkill{k}"
        shutil.copytree(root / "short", out)
        proc = subprocess.Popen([*cmd, "--output-dir", str(out)], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 6.0))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        _assert_never_claims_done_early(out)
        subprocess.run([*cmd, "--output-dir", str(out)], env=env, check=True, capture_output=True)
        _assert_same_as_reference(out, root / "reference")
