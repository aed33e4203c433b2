"""Never lose a record: one trainer per run folder, early stops that survive a crash, clean files on disk,
disk-full and signal messages that say how to resume, and results that refuse a run whose records have gaps."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_records import comparable_records

from dgmoe.algorithms import get_algorithm
from dgmoe.algorithms.registry import ALGORITHMS
from dgmoe.engine import rundir
from dgmoe.engine.config import RunConfig
from dgmoe.engine.lock import RunLock, lock_holder
from dgmoe.engine.trainer import train
from dgmoe.errors import DiskFullError, RunLockedError
from dgmoe.report.collect import RecordError, load_records

BASE = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, steps=7,
            checkpoint_freq=2, n_per_domain=20, progress="none", num_threads=1)


def cmd(out: Path, steps: int = 400) -> list[str]:
    return [sys.executable, "-m", "dgmoe", "train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28",
            "--model-kwargs", '{"depth": 1}', "--steps", str(steps), "--checkpoint-freq", "2", "--n-per-domain", "20",
            "--num-threads", "1", "--output-dir", str(out), "--progress", "none"]


def wait_for(predicate, timeout=120.0):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_a_second_trainer_is_refused_while_the_first_lives_and_no_record_is_lost(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(cmd(out, steps=9), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (out / "results.jsonl").exists())
        os.kill(first.pid, signal.SIGSTOP)  # paused, holding the lock, between two checkpoints
        with pytest.raises(RunLockedError, match=f"pid {first.pid} on "):
            train(RunConfig.from_flat(**{**BASE, "steps": 9, "model_kwargs": {"depth": 1}, "output_dir": str(out)}))
        assert lock_holder(out)["pid"] == first.pid
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert [r["step"] for r in comparable_records(out)] == [0, 2, 4, 6, 8] and lock_holder(out) is None
    assert load_records(tmp_path)["step"].tolist() == [0, 2, 4, 6, 8]


def test_the_lock_is_released_when_its_holder_dies(tmp_path):
    lock = RunLock(tmp_path)
    lock.acquire()
    assert lock_holder(tmp_path)["pid"] == os.getpid()
    with pytest.raises(RunLockedError):
        RunLock(tmp_path).acquire()
    lock.release()
    assert lock_holder(tmp_path) is None
    RunLock(tmp_path).acquire()  # free again


class StopsAfterTwoCheckpoints(get_algorithm("ERM")):
    """ERM whose evaluated model "cannot change" after its second checkpoint (SWAD's early stop, made
    deterministic)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.register_buffer("checkpoints", __import__("torch").zeros((), dtype=__import__("torch").long))

    def on_checkpoint(self, step, val_loss):
        self.checkpoints += 1

    @property
    def stop_requested(self) -> bool:
        return int(self.checkpoints) >= 2


@pytest.fixture
def stopping_algorithm():
    ALGORITHMS.add("StopsAfterTwoCheckpoints", StopsAfterTwoCheckpoints)
    yield "StopsAfterTwoCheckpoints"
    ALGORITHMS._items.pop("StopsAfterTwoCheckpoints")


def test_early_stop_then_a_crash_before_done_resumes_to_the_uninterrupted_records(tmp_path, stopping_algorithm,
                                                                                 monkeypatch):
    ref, crashed = tmp_path / "ref", tmp_path / "crashed"
    train(RunConfig.from_flat(**{**BASE, "algorithm": stopping_algorithm, "output_dir": str(ref)}))
    assert [r["step"] for r in comparable_records(ref)] == [0, 2]
    finish = rundir.RunWriter.finish

    class Crash(Exception):
        pass

    def crash(self, *a, **k):
        raise Crash  # killed after the last checkpoint, before `done`

    monkeypatch.setattr(rundir.RunWriter, "finish", crash)
    with pytest.raises(Crash):
        train(RunConfig.from_flat(**{**BASE, "algorithm": stopping_algorithm, "output_dir": str(crashed)}))
    assert not (crashed / "done").exists()
    monkeypatch.setattr(rundir.RunWriter, "finish", finish)
    train(RunConfig.from_flat(**{**BASE, "algorithm": stopping_algorithm, "output_dir": str(crashed)}))
    assert comparable_records(crashed) == comparable_records(ref)
    assert json.loads((crashed / "done").read_text())["stopped_early"] is True
    assert len(load_records(crashed)) == 2  # a finished early stop is complete


def test_files_follow_the_umask_and_stale_temporaries_are_removed(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    stale = out / ".results.jsonl.abc123.tmp"
    stale.write_text("half a record")
    old = os.umask(0o022)
    try:
        train(RunConfig.from_flat(**{**BASE, "output_dir": str(out), "keep_resume": True}))
    finally:
        os.umask(old)
    assert not list(out.glob(".*.tmp"))
    for name in ("results.jsonl", "config.json", "model.safetensors", "best.safetensors", "resume.pt", "done"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name


def test_skip_model_save_keeps_records_and_config_only(tmp_path):
    out = tmp_path / "run"
    train(RunConfig.from_flat(**{**BASE, "output_dir": str(out), "skip_model_save": True}))
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["config.json", "done",
                                                                                 "results.jsonl", "train.log"]


def test_every_checkpoint_model_and_a_finished_run_drops_its_resume_state(tmp_path):
    out = tmp_path / "run"
    train(RunConfig.from_flat(**{**BASE, "output_dir": str(out), "save_model_every_checkpoint": True}))
    assert sorted(p.name for p in out.glob("model_step*.safetensors")) == [
        f"model_step{s}.safetensors" for s in (0, 2, 4, 6)]
    assert not (out / "resume.pt").exists()


def test_a_full_disk_names_the_file_and_the_run_resumes(tmp_path, monkeypatch):
    out = tmp_path / "run"
    from dgmoe import atomic

    real = atomic._write_all  # where the bytes of every file reach the disk, inside the atomic write
    calls = []

    def fill_up(tmp, data):
        if tmp.name.startswith(".model.safetensors."):
            calls.append(tmp)
        if len(calls) == 2:  # the second checkpoint's model.safetensors
            raise OSError(errno.ENOSPC, "No space left on device")
        real(tmp, data)

    monkeypatch.setattr(atomic, "_write_all", fill_up)
    with pytest.raises(DiskFullError, match=r"disk full while writing .*model.safetensors; free space and re-run the "
                                            r"same command to resume from step 1"):
        train(RunConfig.from_flat(**{**BASE, "output_dir": str(out)}))
    monkeypatch.setattr(atomic, "_write_all", real)
    train(RunConfig.from_flat(**{**BASE, "output_dir": str(out)}))
    ref = tmp_path / "ref"
    train(RunConfig.from_flat(**{**BASE, "output_dir": str(ref)}))
    assert comparable_records(out) == comparable_records(ref) and not list(out.glob(".*.tmp"))


def test_sigterm_ends_with_one_line_saying_how_to_resume(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(cmd(out), env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (out / "resume.pt").exists())  # a checkpoint is complete
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    last = proc.stderr.read().strip().splitlines()[-1]
    assert last.startswith("dgmoe: error: ") and "stopped by SIGTERM" in last and "re-run the same command to " \
        "resume from step" in last
    assert lock_holder(out) is None


def test_results_refuse_a_finished_run_whose_records_have_gaps(tmp_path):
    out = tmp_path / "run"
    train(RunConfig.from_flat(**{**BASE, "output_dir": str(out)}))
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("\n".join(lines[:2]) + "\n")  # what a second, stale trainer left
    with pytest.raises(RecordError, match=r"missing steps \[4, 6\]"):
        load_records(tmp_path)
