"""No silent corruption in the corners: a resume state that belongs to another run, a diverging loss, a
folder left by a run that failed before its first record, temporaries of killed writers, unreadable run folders,
simultaneous sweep launches, a class folder linked into another, a deleted lock file, a huge --steps."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dgmoe.engine.config import RunConfig
from dgmoe.engine.finite import FiniteWatch
from dgmoe.engine.rundir import Schedule
from dgmoe.engine.sinks import Sink
from dgmoe.engine.trainer import train
from dgmoe.errors import NonFiniteLossError, RunLockedError

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            steps=6, checkpoint_freq=2, num_threads=1, progress="none")


def argv(out, **changes) -> list[str]:
    return ["train", *RunConfig.from_flat({**TINY, **changes, "output_dir": str(out)}).to_argv()]


class Killed(BaseException):
    """Stands for SIGKILL: nothing in the engine handles it."""


class KillAt(Sink):
    def __init__(self, step: int, error: BaseException | None = None):
        self.at, self.error = step, error

    def step(self, step, metrics, train_seconds):
        if step == self.at:
            raise self.error or Killed


def interrupted(out, **changes) -> Path:
    """A run killed after step 3 (its resume state is at step 2)."""
    with pytest.raises(Killed):
        train(sinks=[KillAt(3)], **{**TINY, **changes, "output_dir": str(out)})
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".dgmoe.lock"}


def one_line_error(result, code: int) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("dgmoe: error: "), result.output
    return lines[0]


def test_a_resume_state_of_another_run_is_refused_untouched(tmp_path, cli):
    first, second = interrupted(tmp_path / "s0", seed=0), interrupted(tmp_path / "s1", seed=1)
    shutil.copy(first / "resume.pt", second / "resume.pt")
    before = snapshot(second)
    line = one_line_error(cli(*argv(second, seed=1)), 2)
    assert str(second / "resume.pt") in line and "differs in: seed" in line
    assert snapshot(second) == before
    # another model's state: refused the same way, also when written before states named their run
    other = interrupted(tmp_path / "deep", model_kwargs={"depth": 2})
    state = torch.load(other / "resume.pt", weights_only=True)
    shutil.copy(other / "resume.pt", second / "resume.pt")
    assert "model_kwargs" in one_line_error(cli(*argv(second, seed=1)), 2)
    torch.save({k: v for k, v in state.items() if k != "identity"}, second / "resume.pt")
    line = one_line_error(cli(*argv(second, seed=1)), 2)
    assert str(second / "resume.pt") in line and "do not fit this model" in line
    assert cli(*argv(first, seed=0)).exit_code == 0  # in its own folder it resumes
    assert "from step 3" in (first / "train.log").read_text()


def test_a_diverging_run_stops_and_leaves_no_usable_record(tmp_path, cli):
    out = tmp_path / "nan"
    line = one_line_error(cli(*argv(out, hparams={"lr": 1e6})), 3)
    assert "non-finite at step 1" in line and "loss_task" in line and "--on-nonfinite-loss continue" in line
    records = [json.loads(r) for r in (out / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0] and not (out / "done").exists()
    tables = cli("results", tmp_path, "--no-save")  # nothing selection could use
    assert tables.exit_code == 2 and "no records" in tables.output and "unfinished" in tables.output
    onward = tmp_path / "domainbed"
    assert cli(*argv(onward, hparams={"lr": 1e6}, on_nonfinite_loss="continue")).exit_code == 0
    assert (onward / "done").exists() and "non-finite at step 1" in (onward / "train.log").read_text()


def test_nonfinite_terms_are_tracked_on_the_device_from_their_first_step(monkeypatch):
    watch = FiniteWatch()
    with monkeypatch.context() as patch:  # observing reads nothing back from the device
        for read_back in ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy"):
            patch.setattr(torch.Tensor, read_back, lambda *a, **k: pytest.fail("read back from the device"))
        for step, aux in [(0, 1.0), (1, 2.0), (2, float("nan")), (3, float("inf"))]:
            watch.observe(step, {"loss": torch.tensor(aux + 1), "loss_aux": torch.tensor(aux), "host": 0.5})
        watch.observe(4, {"loss": torch.tensor(float("nan")), "loss_aux": torch.tensor(1.0), "host": float("nan")})
    assert watch.first_nonfinite() == (2, ["loss", "loss_aux"])
    with pytest.raises(NonFiniteLossError, match=r"run: .* at step 2 \(loss, loss_aux NaN"):
        watch.check("run")
    assert "step 2" in watch.check("run", stop=False) and watch.check("run", stop=False) is None  # said once
    assert FiniteWatch().check("run") is None


def test_a_folder_without_records_is_taken_over_and_the_device_is_checked_first(tmp_path, cli):
    out = tmp_path / "run"
    if not torch.cuda.is_available():
        assert "no CUDA device" in one_line_error(cli(*argv(out, device="cuda")), 2)
    assert "cuda:63" in one_line_error(cli(*argv(out, device="cuda:63")), 2) and not out.exists()
    with pytest.raises(RuntimeError, match="out of memory"):  # killed by out-of-memory at its first step
        train(sinks=[KillAt(0, RuntimeError("CUDA out of memory"))], hparams={"batch_size": 30},
              output_dir=str(out), **TINY)
    assert (out / "config.json").exists() and not (out / "results.jsonl").exists()
    result = cli(*argv(out, hparams={"batch_size": 8}))
    assert result.exit_code == 0 and "holds no record yet" in (out / "train.log").read_text()
    assert json.loads((out / "config.json").read_text())["hparams"]["batch_size"] == 8
    assert "differs in: hparams" in one_line_error(cli(*argv(out, hparams={"batch_size": 4})), 2)  # it has records


def test_temporaries_and_a_leftover_resume_state_are_removed_on_the_next_run(tmp_path):
    out = tmp_path / "run"
    train(output_dir=str(out), **TINY)
    (out / ".model.safetensors.x1.tmp").write_bytes(b"partial")
    (out / "resume.pt").write_bytes(b"left by a crash between done and its removal")
    assert train(output_dir=str(out), **TINY).already_done
    assert not list(out.glob("*.tmp*")) and not list(out.glob(".*.tmp*")) and not (out / "resume.pt").exists()
    kept = tmp_path / "kept"
    train(output_dir=str(kept), keep_resume=True, **TINY)
    train(output_dir=str(kept), **TINY)
    assert (kept / "resume.pt").exists()  # a run that keeps it (to --extend later) keeps it


def test_a_killed_cache_writer_leaves_nothing_after_the_next_prepare(tmp_path):
    from dgmoe.data import prepare_dataset
    from dgmoe.data.cache import cache_folder

    rng = np.random.RandomState(0)
    for domain in ("art_painting", "cartoon", "photo", "sketch"):
        for cls in ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person"):
            (tmp_path / "data" / "PACS" / domain / cls).mkdir(parents=True)
            Image.fromarray(rng.randint(0, 256, (6, 6, 3), dtype=np.uint8)).save(
                tmp_path / "data" / "PACS" / domain / cls / "0.png")
    folder = cache_folder(tmp_path / "cache", "PACS", 8)
    folder.mkdir(parents=True)
    (folder / ".domain0_images.npy.tmp-4242").write_bytes(b"\0" * 1000)  # a killed `dgmoe data prepare`
    prepare_dataset("PACS", tmp_path / "data", img_size=8, cache_dir=tmp_path / "cache")
    assert not [p.name for p in folder.iterdir() if ".tmp" in p.name]


def test_unreadable_run_folders_are_named(tmp_path, cli, monkeypatch):
    train(output_dir=str(tmp_path / "mine"), **TINY)
    train(output_dir=str(tmp_path / "theirs"), seed=1, **TINY)
    scandir, walk_blocked = os.scandir, str(tmp_path / "theirs")

    def umask_077(path="."):  # as another user's folder made under umask 077 reads to us (we may be root here)
        if os.fspath(path) == walk_blocked:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", umask_077)
    result = cli("results", tmp_path, "--no-save")
    assert result.exit_code == 0 and f"cannot read {tmp_path / 'theirs'}" in result.output
    report = cli("report", tmp_path, "--no-params", "--out", tmp_path / "report")
    assert report.exit_code == 0 and f"cannot read {tmp_path / 'theirs'}" in report.output


def test_unreadable_job_folders_are_named_by_sweep_status(tmp_path, cli, monkeypatch):
    from dgmoe.sweep import status

    for job in ("a" * 32, "b" * 32):
        (tmp_path / job).mkdir()
    job_state = status.state.job_state

    def umask_077(job_dir, *args):
        if Path(job_dir).name == "b" * 32:
            raise PermissionError(13, "Permission denied", str(job_dir))
        return job_state(job_dir, *args)

    monkeypatch.setattr(status.state, "job_state", umask_077)
    result = cli("sweep", "status", "--output-dir", tmp_path)
    assert result.exit_code == 0 and "1 job(s)" in result.output
    assert f"cannot read {tmp_path / ('b' * 32)}" in result.output


def _launch(output_dir: str, k: int, barrier) -> None:
    from dgmoe.sweep.jobs import Job, write_manifest

    config = RunConfig.from_flat(dataset="RotatedMNIST", seed=k)
    barrier.wait()
    write_manifest([Job(config, config.identity_hash(), output_dir)], output_dir)


def test_simultaneous_launches_keep_every_job_in_the_manifest(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(6)
    procs = [context.Process(target=_launch, args=(str(tmp_path / "sweep"), k, barrier)) for k in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    jobs = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["jobs"]
    assert len(jobs) == 6


def test_a_class_folder_linked_into_another_class_is_refused(tmp_path):
    from dgmoe.data.errors import LayoutError
    from dgmoe.data.folder import scan_folder

    for cls in ("dog", "horse"):
        (tmp_path / "photo" / cls).mkdir(parents=True)
        Image.new("RGB", (4, 4)).save(tmp_path / "photo" / cls / "0.png")
    scan_folder(tmp_path, "custom")
    (tmp_path / "photo" / "dog" / "more").symlink_to("../horse")
    with pytest.raises(LayoutError, match="leads into the class folder .*horse"):
        scan_folder(tmp_path, "custom")


class DeleteLock(Sink):
    def step(self, step, metrics, train_seconds):
        if step == 1:
            (Path(self.out) / ".dgmoe.lock").unlink()


def test_a_deleted_lock_file_stops_the_trainer_before_its_next_write(tmp_path):
    sink = DeleteLock()
    sink.out = tmp_path / "run"
    with pytest.raises(RunLockedError, match="deleted or replaced"):
        train(sinks=[sink], output_dir=str(sink.out), **TINY)
    assert [json.loads(r)["step"] for r in (sink.out / "results.jsonl").read_text().splitlines()] == [0]


def test_start_up_does_not_list_the_checkpoints(tmp_path, monkeypatch):
    schedule = Schedule(2_000_000_000, 2)
    assert 1_999_999_999 in schedule and 7 not in schedule and schedule.count_from(1_999_999_990) == 6

    def listing(self):
        raise AssertionError("the checkpoint schedule was listed")

    monkeypatch.setattr(Schedule, "__iter__", listing)
    with pytest.raises(Killed):
        train(sinks=[KillAt(1)], **{**TINY, "steps": 2_000_000_000, "output_dir": str(tmp_path / "run")})
