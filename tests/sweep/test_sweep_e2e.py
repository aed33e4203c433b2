"""End to end with the real `python -m dgmoe train`: tiny RotatedMNIST jobs on a 2-layer ViT.

Launching twice runs each job once (counted by the launch headers in each job's stdout.log and the
mtime of `done`); a training process SIGKILLed mid-way is recorded failed and resumes on relaunch.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dgmoe.devices import resolve_device
from dgmoe.engine.config import RunConfig
from dgmoe.sweep import state
from dgmoe.sweep.config import LaunchConfig, SweepConfig
from dgmoe.sweep.jobs import build_jobs
from dgmoe.sweep.launchers import launch_sweep
from dgmoe.sweep.state import JobState, job_state

TINY = dict(n_per_domain=32, model_kwargs={"depth": 2, "embed_dim": 32, "num_heads": 2}, img_size=28, patch_size=7)
EXEC = dict(num_threads=1, progress="lines")


def _jobs(tmp_path, n: int, steps: int, freq: int):
    base = RunConfig.from_flat(TINY, steps=steps, checkpoint_freq=freq, **EXEC)
    cfg = SweepConfig(datasets=("RotatedMNIST",), algorithms=("ERM",), models=("vit_tiny_patch16_224",),
                      output_dir=str(tmp_path / "sweep"), base=base, n_hparams=1, n_trials=1, single_test_envs=True)
    return build_jobs(cfg)[:n]  # a partial grid: the first n held-out domains


def _launches(job) -> int:
    return (job.dir / "stdout.log").read_text().count("=== dgmoe sweep")


def _record_steps(job) -> list[int]:
    return [json.loads(line)["step"] for line in (job.dir / "results.jsonl").read_text().splitlines()]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("launcher", ["local", pytest.param("submitit-local", marks=pytest.mark.slow)])
def test_real_jobs_launched_twice_run_once(tmp_path, launcher):
    if launcher.startswith("submitit"):
        pytest.importorskip("submitit", reason="the submitit launchers need `pip install dgmoe[slurm]`")
    jobs = _jobs(tmp_path, n=2, steps=4, freq=2)
    opts = LaunchConfig(max_workers=2)
    first = launch_sweep(jobs, launcher, opts, echo=lambda s: None)
    assert sorted(o.outcome for o in first.outcomes) == ["done", "done"], [
        (j.dir / "stderr.log").read_text()[-2000:] for j in jobs]
    done_mtimes = [(j.dir / "done").stat().st_mtime_ns for j in jobs]
    second = launch_sweep(jobs, launcher, opts, echo=lambda s: None)
    assert second.launched == 0 and second.states_before[JobState.DONE] == 2
    assert [(j.dir / "done").stat().st_mtime_ns for j in jobs] == done_mtimes
    for j in jobs:
        assert _launches(j) == 1
        assert _record_steps(j) == [0, 2, 3]
        run = RunConfig.from_file(j.dir / "config.json")
        # what train received: the job's config exactly, with `--device auto` recorded as the device used
        assert run == j.config.replace(device=resolve_device(j.config.execution.device))
        assert run.data.n_per_domain == 32 and run.execution.num_threads == 1


@pytest.mark.slow
def test_real_job_killed_midway_resumes(tmp_path):
    (job,) = _jobs(tmp_path, n=1, steps=300, freq=20)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"config": job.config.to_dict(), "output_dir": job.output_dir}))
    driver = (
        "import json, sys; from dgmoe.engine.config import RunConfig; from dgmoe.sweep.jobs import make_job; "
        "from dgmoe.sweep.launchers import launch_sweep; p = json.load(open(sys.argv[1])); "
        "launch_sweep([make_job(RunConfig.from_dict(p['config']), p['output_dir'])], 'local')")
    proc = subprocess.Popen([sys.executable, "-c", driver, str(plan)], stdout=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        results = job.dir / "results.jsonl"
        deadline = time.time() + 120
        while not (results.exists() and len(results.read_text().splitlines()) >= 2):
            assert time.time() < deadline and proc.poll() is None, "the job did not reach step 20"
            time.sleep(0.05)
        assert job_state(job.dir) is JobState.RUNNING
        child = state.running_info(job.dir)["child_pid"]
        os.kill(child, signal.SIGKILL)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert job_state(job.dir) is JobState.FAILED
    assert not (job.dir / "done").exists()
    again = launch_sweep([job], "local", LaunchConfig(), echo=lambda s: None)
    assert again.launched == 1 and [o.outcome for o in again.outcomes] == ["done"]
    assert "resuming" in (job.dir / "stderr.log").read_text()
    assert _record_steps(job) == list(range(0, 300, 20)) + [299]
    assert _launches(job) == 2
