"""Launching a sweep twice runs each job once; killed jobs resume. Uses a fake training command.

The fake `train` is called as the launchers call `dgmoe train` (`--config <job>/job.json`), logs every
invocation to $FAKE_LOG, appends one record per step to results.jsonl, keeps its progress in a `progress`
file (so a rerun resumes), writes `done` at the end, and can SIGKILL itself at step $FAKE_DIE_AT or sleep
at step $FAKE_HANG_AT.
"""
import dataclasses
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dgmoe.engine.config import RunConfig
from dgmoe.sweep import state
from dgmoe.sweep.config import LaunchConfig, SweepConfig
from dgmoe.sweep.jobs import build_jobs
from dgmoe.sweep.launchers import launch_sweep
from dgmoe.sweep.state import JobState, job_state
from dgmoe.sweep.status import sweep_status

FAKE_TRAIN = r'''
import argparse, json, os, signal, sys, time
from pathlib import Path
p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
args = p.parse_args()
config = json.loads(Path(args.config).read_text())["config"]
out = Path(config["execution"]["output_dir"])
steps = config["training"]["steps"]
out.mkdir(parents=True, exist_ok=True)
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({"job": out.name, "pid": os.getpid()}) + "\n")
if (out / "done").exists():
    sys.exit(0)
from dgmoe.engine.lock import RunLock
from dgmoe.errors import RunLockedError
try:
    lock = RunLock(out)  # held for the trainer's life, as `dgmoe train` holds its run folder
    lock.acquire()
except RunLockedError:
    sys.exit(RunLockedError.exit_code)
progress = out / "progress"
start = int(progress.read_text()) if progress.exists() else 0
for step in range(start, steps):
    time.sleep(float(os.environ.get("FAKE_STEP_S", 0)))
    if step == int(os.environ.get("FAKE_DIE_AT", -1)):
        os.kill(os.getpid(), signal.SIGKILL)
    if step == int(os.environ.get("FAKE_HANG_AT", -1)):
        (out / "hanging").write_text(str(os.getpid()))
        time.sleep(600)
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps({"step": step}) + "\n")
    progress.write_text(str(step + 1))
(out / "done").write_text("done")
'''
N_JOBS = 3


@pytest.fixture
def fake(tmp_path, monkeypatch):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    log = tmp_path / "invocations.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    for name in ("FAKE_DIE_AT", "FAKE_HANG_AT", "FAKE_STEP_S"):
        monkeypatch.delenv(name, raising=False)
    cfg = SweepConfig(datasets=("Fake",), algorithms=("ERM",), models=("tiny",),
                      base=RunConfig.from_flat(data_dir=str(tmp_path), steps=4),
                      output_dir=str(tmp_path / "sweep"), n_hparams=1, n_trials=1, single_test_envs=True)
    jobs = build_jobs(cfg, n_domains={"Fake": N_JOBS})
    opts = LaunchConfig(train_command=(sys.executable, str(script)), max_workers=2, heartbeat_s=0.2)
    return jobs, opts, log


@pytest.fixture
def start_launch(tmp_path):
    """Start `launch_sweep(jobs, 'local', opts)` in its own process group; the group dies at teardown."""
    procs: list[subprocess.Popen] = []

    def start(jobs, opts) -> subprocess.Popen:
        plan = tmp_path / f"plan{len(procs)}.pkl"
        plan.write_bytes(pickle.dumps((jobs, opts)))
        driver = ("import sys, pickle; from dgmoe.sweep.launchers import launch_sweep; "
                  "jobs, opts = pickle.load(open(sys.argv[1], 'rb')); launch_sweep(jobs, 'local', opts)")
        proc = subprocess.Popen([sys.executable, "-c", driver, str(plan)], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _invocations(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        job = json.loads(line)["job"]
        counts[job] = counts.get(job, 0) + 1
    return counts


def _steps(job) -> list[int]:
    return [json.loads(line)["step"] for line in (job.dir / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("launcher", ["local", pytest.param("submitit-local", marks=pytest.mark.slow)])
def test_launch_twice_runs_each_job_once(fake, launcher):
    jobs, opts, log = fake
    if launcher.startswith("submitit"):
        pytest.importorskip("submitit", reason="the submitit launchers need `pip install dgmoe[slurm]`")
    first = launch_sweep(jobs, launcher, opts, echo=lambda s: None)
    assert first.launched == N_JOBS
    assert sorted(o.outcome for o in first.outcomes) == ["done"] * N_JOBS
    assert all(job_state(j.dir) is JobState.DONE for j in jobs)
    second = launch_sweep(jobs, launcher, opts, echo=lambda s: None)
    assert second.launched == 0 and second.states_before[JobState.DONE] == N_JOBS
    assert _invocations(log) == {j.job_id: 1 for j in jobs}
    assert all(_steps(j) == [0, 1, 2, 3] for j in jobs)
    assert all((j.dir / "stdout.log").exists() and (j.dir / "stderr.log").exists() for j in jobs)


def test_submitit_auto_executor_without_waiting_is_not_launched_twice(fake, monkeypatch):
    """`submitit` (AutoExecutor, here on its local cluster) with Slurm options, relaunched while running."""
    pytest.importorskip("submitit", reason="the submitit launchers need `pip install dgmoe[slurm]`")
    jobs, opts, log = fake
    jobs = jobs[:2]
    monkeypatch.setenv("FAKE_STEP_S", "0.2")
    opts = dataclasses.replace(opts, submitit_cluster="local", wait=False, slurm_partition="gpu",
                               slurm_gpus_per_node=0, slurm_mem_gb=4, slurm_extra={"account": "dg"})
    lines: list[str] = []
    first = launch_sweep(jobs, "submitit", opts, echo=lines.append)
    assert first.launched == 2 and first.outcomes == []
    assert "submitted 2 job(s) with submitit" in lines[-1]
    second = launch_sweep(jobs, "submitit", opts, echo=lambda s: None)
    assert second.launched == 0
    assert second.states_before[JobState.QUEUED] + second.states_before[JobState.RUNNING] == 2
    deadline = time.time() + 60
    while not all(job_state(j.dir) is JobState.DONE for j in jobs):
        assert time.time() < deadline, [job_state(j.dir) for j in jobs]
        time.sleep(0.2)
    assert _invocations(log) == {j.job_id: 1 for j in jobs}


def test_job_killed_midway_is_recorded_failed_and_resumes(fake, monkeypatch):
    jobs, opts, log = fake
    monkeypatch.setenv("FAKE_DIE_AT", "2")  # every job SIGKILLs itself before step 2
    report = launch_sweep(jobs, "local", opts, echo=lambda s: None)
    assert [o.outcome for o in report.outcomes] == ["failed"] * N_JOBS
    assert {o.returncode for o in report.outcomes} == {-signal.SIGKILL}
    statuses = sweep_status(jobs[0].output_dir)
    assert {s.state for s in statuses} == {JobState.FAILED}
    assert "exit -9" in statuses[0].detail
    monkeypatch.delenv("FAKE_DIE_AT")
    again = launch_sweep(jobs, "local", opts, echo=lambda s: None)
    assert again.states_before[JobState.FAILED] == N_JOBS and again.launched == N_JOBS
    assert all(job_state(j.dir) is JobState.DONE for j in jobs)
    assert all(_steps(j) == [0, 1, 2, 3] for j in jobs)  # resumed: no step ran twice
    assert _invocations(log) == {j.job_id: 2 for j in jobs}
    assert not any((j.dir / "failed.json").exists() for j in jobs)


def test_killed_launcher_leaves_incomplete_jobs_that_resume(fake, start_launch, monkeypatch):
    """SIGKILL the whole launch (launcher, runner and training process) while jobs run."""
    jobs, opts, log = fake
    monkeypatch.setenv("FAKE_HANG_AT", "1")
    proc = start_launch(jobs, opts)
    hanging = [j.dir / "hanging" for j in jobs]
    deadline = time.time() + 60
    while sum(p.exists() for p in hanging) < opts.max_workers:
        assert time.time() < deadline, "jobs did not start"
        time.sleep(0.1)
    states = [job_state(j.dir) for j in jobs]
    assert states.count(JobState.RUNNING) == 2 and states.count(JobState.QUEUED) == 1
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)
    # dead pids on this host: neither running nor queued any more, so a relaunch picks them up
    assert sorted(s.value for s in (job_state(j.dir) for j in jobs)) == ["incomplete"] * N_JOBS
    monkeypatch.delenv("FAKE_HANG_AT")
    again = launch_sweep(jobs, "local", opts, echo=lambda s: None)
    assert again.launched == N_JOBS
    assert all(job_state(j.dir) is JobState.DONE for j in jobs)
    for j, h in zip(jobs, hanging):
        assert _steps(j) == [0, 1, 2, 3]
        assert _invocations(log)[j.job_id] == (2 if h.exists() else 1)


def wait_until_a_job_hangs(jobs, timeout_s: float = 60) -> None:
    """Until a fake trainer marks its job as hanging (a limit on waiting, not a verdict on speed)."""
    deadline = time.time() + timeout_s
    while not any((j.dir / "hanging").exists() for j in jobs):
        assert time.time() < deadline, "no job started"
        time.sleep(0.1)


def test_ctrl_c_stops_the_local_launch(fake, start_launch, monkeypatch):
    """SIGINT to the launch's process group: the running job ends failed, queued jobs never start."""
    jobs, opts, log = fake
    monkeypatch.setenv("FAKE_HANG_AT", "1")
    proc = start_launch(jobs, dataclasses.replace(opts, max_workers=1))
    wait_until_a_job_hangs(jobs)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) != 0
    states = sorted(job_state(j.dir).value for j in jobs)
    assert states == ["failed", "incomplete", "incomplete"]
    assert len(_invocations(log)) == 1


def test_killing_only_the_launcher_keeps_its_trainer_running_and_a_relaunch_starts_no_second(
        fake, start_launch, monkeypatch):
    jobs, opts, log = fake
    monkeypatch.setenv("FAKE_HANG_AT", "1")
    proc = start_launch(jobs, dataclasses.replace(opts, max_workers=1))
    wait_until_a_job_hangs(jobs)
    os.kill(proc.pid, signal.SIGKILL)  # the launcher only: its trainer lives on, orphaned
    proc.wait()
    live = next(j for j in jobs if (j.dir / "hanging").exists())
    assert job_state(live.dir) == JobState.RUNNING
    monkeypatch.delenv("FAKE_HANG_AT")
    report = launch_sweep(jobs, "local", opts, echo=lambda s: None)
    assert report.states_before[JobState.RUNNING] == 1
    assert _invocations(log)[live.job_id] == 1  # no second trainer on the live job
    assert job_state(live.dir) == JobState.RUNNING
    assert sorted(job_state(j.dir).value for j in jobs if j is not live) == ["done", "done"]


def test_running_job_is_not_launched_twice(fake):
    jobs, opts, log = fake
    jobs[0].dir.mkdir(parents=True)
    assert state.acquire_running(jobs[0].dir, {"host": "another-node", "pid": 1})
    report = launch_sweep(jobs, "local", opts, echo=lambda s: None)
    assert report.states_before[JobState.RUNNING] == 1 and report.launched == N_JOBS - 1
    assert jobs[0].job_id not in _invocations(log)


def test_dummy_launcher_prints_commands_and_creates_nothing(fake):
    jobs, opts, _ = fake
    lines: list[str] = []
    report = launch_sweep(jobs, "dummy", opts, echo=lines.append)
    assert report.launched == N_JOBS
    assert sum(line.startswith("Dummy launcher: ") for line in lines) == N_JOBS
    assert not Path(jobs[0].output_dir).exists()


def test_unknown_launcher_suggests_names(fake):
    jobs, opts, _ = fake
    with pytest.raises(KeyError, match="Did you mean: local"):
        launch_sweep(jobs, "locl", opts)


def test_cli_launch_status_delete(tmp_path, monkeypatch, cli):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log.jsonl"))
    monkeypatch.setenv("FAKE_DIE_AT", "1")
    for domain in ("d0", "d1", "d2"):
        (tmp_path / "data" / domain).mkdir(parents=True)
    out = tmp_path / "sweep"
    args = ["launch", "--datasets", "ImageFolder", "--algorithms", "ERM",
            "--models", "vit_micro_patch7_28,gmoe_micro_patch7_28",
            "--data-dir", str(tmp_path / "data"), "--output-dir", str(out), "--n-hparams", "1",
            "--n-trials", "1", "--steps", "3", "--single-test-envs", "--max-workers", "2",
            "--train-command", f"{sys.executable} {script}", "--", "--n-per-domain", "8", "--device", "cpu"]
    result = cli("sweep", *args)
    assert result.exit_code == 1 and "6 job(s) failed" in result.output
    assert "] failed: ImageFolder ERM gmoe_micro_patch7_28 test_envs=" in result.output  # jobs named in words
    assert result.output.count("started: ImageFolder ERM ") == 6
    job = json.loads(next(out.glob("*/job.json")).read_text())["config"]  # what the trainer was given
    assert job["data"]["n_per_domain"] == 8 and job["training"]["steps"] == 3
    assert job["execution"]["data_dir"] == str(tmp_path / "data") and job["data"]["dataset"] == "ImageFolder"
    result = cli("sweep", "status", "--output-dir", out, "-v")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "6 job(s): 0 done, 0 running, 6 failed, 0 queued, 0 incomplete, 0 not launched")
    assert result.output.count("ImageFolder ERM vit_micro_patch7_28 test_envs=") == 3
    result = cli("sweep", "delete-incomplete", "--output-dir", out, "--yes")
    assert result.output.count("      failed  ") == 6  # listed before they go
    assert "deleted 6 job folder(s)" in result.output
    result = cli("sweep", "delete-incomplete", "--output-dir", out, "--yes")
    assert "nothing to delete" in result.output
    result = cli("sweep", "status", "--output-dir", out)
    assert "6 not launched" in result.output
    monkeypatch.delenv("FAKE_DIE_AT")
    result = cli("sweep", *args)
    assert result.exit_code == 0, result.output
    result = cli("sweep", "status", "--output-dir", out)
    assert result.output.startswith("6 job(s): 6 done,")


@pytest.mark.parametrize("flags, message", [
    (["--", "--seed", "3"], "--seed after `--` is set by the sweep"),
    (["--", "--stps", "3"], "--stps after `--` is not a `dgmoe train` flag (did you mean --steps"),
    (["--", "--n-per-domain", "0"], "--n-per-domain must be >= 1"),
    (["--train-args", "--test-envs 1"], "--test-envs after `--` is set by the sweep"),
])
def test_cli_launch_refuses_bad_train_flags_before_writing(tmp_path, cli, flags, message):
    out = tmp_path / "sweep"
    result = cli("sweep", "launch", "--datasets", "RotatedMNIST", "--algorithms", "ERM", "--models",
                 "vit_micro_patch7_28", "--output-dir", out, "--n-hparams", "1", "--n-trials", "1", *flags)
    assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1, result.output
    assert not out.exists()


def test_cli_old_train_and_exec_args_still_work(tmp_path, cli):
    result = cli("sweep", "launch", "--datasets", "RotatedMNIST", "--algorithms", "ERM", "--models",
                 "vit_micro_patch7_28", "--output-dir", tmp_path / "s", "--n-hparams", "1", "--n-trials", "1",
                 "--single-test-envs", "--launcher", "dummy", "--train-args", "--n-per-domain 8",
                 "--exec-args", "--device cuda")
    assert result.exit_code == 0, result.output
    commands = [line for line in result.output.splitlines() if line.startswith("Dummy launcher: ")]
    assert len(commands) == 6 and all("--n-per-domain 8" in c and "--device cuda" in c for c in commands)
