"""Run one sweep job: claim its directory, train its config with a heartbeat, record how it ended.

`JobRunner` is what every launcher executes, in a thread of the local pool or as a submitit function
on a Slurm node. It holds the job's `RunConfig` (submitit pickles it), writes it to `<job>/job.json` and runs
`<train command> --config <job>/job.json` as a child process: a process of its own, so that a crash or an
out-of-memory kill of one run never takes the launcher down, and the heartbeat and run lock see it live.
Its `checkpoint` method makes submitit requeue a job that hits the Slurm time limit or is preempted, and
the requeued job resumes through the training command's own resume.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import write_json_atomic
from dgmoe.engine.lock import lock_holder
from dgmoe.errors import RunLockedError
from dgmoe.sweep import state

# what a runner reports; `skipped_*` means it found nothing to do, `cancelled` that the launch was stopped
# before this job started
Outcome = Literal["done", "failed", "skipped_done", "skipped_running", "cancelled"]


@dataclass(frozen=True)
class JobOutcome:
    job_dir: str
    outcome: Outcome
    returncode: int | None = None
    title: str = ""  # what the job runs, in words


JOB_CONFIG_NAME = "job.json"


@dataclass(frozen=True)
class JobRunner:
    """Callable that trains `config` in its output dir with `train_command` (see module docstring)."""

    config: RunConfig
    train_command: tuple[str, ...]
    launcher: str = "local"
    heartbeat_s: float = state.HEARTBEAT_S
    env: tuple[tuple[str, str], ...] = ()  # extra environment, e.g. CUDA_VISIBLE_DEVICES of a pool slot
    title: str = ""

    @property
    def job_dir(self) -> str:
        return str(self.config.execution.output_dir)  # a job always has its folder

    @property
    def command(self) -> tuple[str, ...]:
        return (*self.train_command, "--config", str(Path(self.job_dir) / JOB_CONFIG_NAME))

    def __call__(self) -> JobOutcome:
        outcome = self._claim_and_run()
        return dataclasses.replace(outcome, title=self.title)

    def _claim_and_run(self) -> JobOutcome:
        d = Path(self.job_dir)
        d.mkdir(parents=True, exist_ok=True)
        if (d / state.DONE_NAME).exists():
            state.clear_submitted(d)
            return JobOutcome(self.job_dir, "skipped_done")
        if lock_holder(d) is not None:  # a trainer lives on (its launcher may have been killed)
            return JobOutcome(self.job_dir, "skipped_running")
        if not state.acquire_running(d, state.runner_info(self.launcher)):
            return JobOutcome(self.job_dir, "skipped_running")
        state.clear_submitted(d)
        state.clear_failed(d)
        write_json_atomic(d / JOB_CONFIG_NAME, {"config": self.config.to_dict()})
        returncode: int | None = None
        try:
            returncode = self._run(d)
        finally:
            state.release_running(d)
        if (d / state.DONE_NAME).exists():
            return JobOutcome(self.job_dir, "done", returncode)
        if returncode == RunLockedError.exit_code:  # another trainer took the run folder first
            return JobOutcome(self.job_dir, "skipped_running", returncode)
        if returncode == 0:
            # the command exited cleanly without writing `done`: count it as a failure, not a success
            returncode = -1000
        state.mark_failed(d, returncode, list(self.command))
        return JobOutcome(self.job_dir, "failed", returncode)

    def _run(self, d: Path) -> int:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **dict(self.env))
        with open(d / "stdout.log", "a") as out, open(d / "stderr.log", "a") as err:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            for f in (out, err):
                f.write(f"=== dgmoe sweep ({self.launcher}) {stamp}: {shlex.join(self.command)}\n")
                f.flush()
            try:
                proc = subprocess.Popen(list(self.command), stdout=out, stderr=err, env=env)
            except OSError as e:  # e.g. the training executable does not exist
                err.write(f"cannot start the job's command: {e}\n")
                return 127
            try:
                state.record_child(d, proc.pid)
                while True:
                    try:
                        return proc.wait(timeout=self.heartbeat_s)
                    except subprocess.TimeoutExpired:
                        state.touch_heartbeat(d)
            finally:
                # reached with the child alive only when this runner is interrupted (Ctrl-C, the
                # SystemExit of submitit's requeue): stop the child so it cannot outlive its claim
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit hook: on timeout or preemption, requeue this same job (it resumes from its files)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self)
