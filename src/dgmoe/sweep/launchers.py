"""Launchers: run a list of sweep jobs somewhere (DomainBed's `command_launchers`, plus Slurm).

A launcher is a function `(runners, options, echo) -> list[JobOutcome]` in the `LAUNCHERS` registry:

- `dummy`: prints each job's equivalent `dgmoe train` command, runs nothing;
- `local`: a pool of `max_workers` concurrent job processes on this machine; with `gpus`, one GPU per
  pool slot through `CUDA_VISIBLE_DEVICES` (DomainBed's `multi_gpu`);
- `submitit`: a Slurm job array through `submitit.AutoExecutor` (which runs locally when no Slurm is
  found); returns at once unless `wait`;
- `submitit-local`: `submitit.LocalExecutor`, every job at once on this machine (used by the tests).

`launch_sweep` is the entry point: it records the grid in `sweep.json` (in each sweep folder, when the
jobs span several, as a recipe's parts do), skips DONE, RUNNING and QUEUED jobs, and relaunches
INCOMPLETE and FAILED ones, which resume through `dgmoe train`'s own resume.
"""
from __future__ import annotations

import dataclasses
import queue
import shlex
import signal
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from dgmoe.registry import Registry
from dgmoe.sweep import state
from dgmoe.sweep.config import LaunchConfig
from dgmoe.sweep.jobs import GRID_KEYS, Job, shuffled, write_manifest
from dgmoe.sweep.runner import JobOutcome, JobRunner
from dgmoe.sweep.state import JobState

Echo = Callable[[str], None]




Launcher = Callable[[Sequence[JobRunner], LaunchConfig, Echo], list[JobOutcome]]
LAUNCHERS: Registry[Launcher] = Registry("launcher")


@LAUNCHERS.register("dummy")
def dummy_launcher(runners: Sequence[JobRunner], opts: LaunchConfig, echo: Echo) -> list[JobOutcome]:
    for r in runners:
        echo(f"Dummy launcher: {shlex.join([*r.train_command, *r.config.to_argv(always=GRID_KEYS)])}")
    return []


#: how a job's command ends when a signal stopped it: killed by SIGINT/SIGTERM, or exiting 130 (dgmoe's
#: `Interrupted`, the shell's convention for Ctrl-C) or 143 (128 + SIGTERM).
INTERRUPTED_RETURNCODES = (-signal.SIGINT, -signal.SIGTERM, 130, 143)


@LAUNCHERS.register("local")
def local_launcher(runners: Sequence[JobRunner], opts: LaunchConfig, echo: Echo) -> list[JobOutcome]:
    """Run jobs concurrently, each as its own process (threads only wait on them)."""
    slots: queue.SimpleQueue[tuple[tuple[str, str], ...]] = queue.SimpleQueue()
    n_slots = len(opts.gpus) if opts.gpus else opts.max_workers
    for i in range(n_slots):
        slots.put((("CUDA_VISIBLE_DEVICES", str(opts.gpus[i])),) if opts.gpus else ())
    for r in runners:
        state.mark_submitted(Path(r.job_dir), "local", local=True)

    stopping = threading.Event()

    def run_in_slot(r: JobRunner) -> JobOutcome:
        if stopping.is_set():
            return JobOutcome(r.job_dir, "cancelled")
        env = slots.get()
        echo(f"started: {r.title} ({Path(r.job_dir).name})")
        try:
            outcome = dataclasses.replace(r, env=env)()
        finally:
            slots.put(env)
        if outcome.returncode in INTERRUPTED_RETURNCODES:
            # the job was stopped by Ctrl-C or SIGTERM: so was this launch; decided here, in the worker, so that
            # no queued job can start before the main thread has seen the signal
            stopping.set()
        return outcome

    outcomes = []
    pool = ThreadPoolExecutor(max_workers=n_slots)
    try:
        futures = [pool.submit(run_in_slot, r) for r in runners]
        for i, fut in enumerate(as_completed(futures), 1):
            outcome = fut.result()
            outcomes.append(outcome)
            echo(f"[{i}/{len(runners)}] {outcome.outcome}: {outcome.title} ({Path(outcome.job_dir).name})")
    finally:
        # on Ctrl-C, start nothing new (running jobs receive the SIGINT themselves and are recorded)
        stopping.set()
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _submitit_launch(executor: Any, runners: Sequence[JobRunner], opts: LaunchConfig,
                     echo: Echo, launcher: str) -> list[JobOutcome]:
    for r in runners:  # before submitting, so a job that starts at once clears the marker itself
        state.mark_submitted(Path(r.job_dir), launcher)
    with executor.batch():
        jobs = [executor.submit(r) for r in runners]
    for r, job in zip(runners, jobs):
        if (Path(r.job_dir) / state.SUBMITTED_NAME).exists():
            state.mark_submitted(Path(r.job_dir), launcher, scheduler_job_id=str(job.job_id))
    ids = sorted({str(j.job_id).split("_")[0] for j in jobs})
    echo(f"submitted {len(jobs)} job(s) with submitit ({launcher}): {', '.join(ids)}")
    if not opts.wait:
        return []
    outcomes = []
    for r, job in zip(runners, jobs):
        try:
            outcomes.append(job.result())
        except Exception as err:  # the runner itself died (e.g. killed); the job dir shows the state
            echo(f"job {job.job_id} ({r.job_dir}) ended without a result: {type(err).__name__}")
            outcomes.append(JobOutcome(r.job_dir, "failed", title=r.title))
    return outcomes


def _submitit_folder(runners: Sequence[JobRunner], opts: LaunchConfig) -> str:
    if opts.submitit_folder:
        return opts.submitit_folder
    return str(Path(runners[0].job_dir).parent / ".submitit" / "%j")


@LAUNCHERS.register("submitit")
def submitit_launcher(runners: Sequence[JobRunner], opts: LaunchConfig, echo: Echo) -> list[JobOutcome]:
    """A Slurm job array, one GPU job per task; `slurm_array_parallelism` caps how many run at once."""
    if not runners:
        return []
    submitit = _import_submitit()
    executor = submitit.AutoExecutor(folder=_submitit_folder(runners, opts), cluster=opts.submitit_cluster)
    params: dict[str, Any] = dict(
        name="dgmoe-sweep", timeout_min=opts.timeout_min, gpus_per_node=opts.slurm_gpus_per_node,
        cpus_per_task=opts.slurm_cpus_per_task, tasks_per_node=1, nodes=1,
        slurm_array_parallelism=opts.slurm_array_parallelism)
    if opts.slurm_partition:
        params["slurm_partition"] = opts.slurm_partition
    if opts.slurm_mem_gb is not None:
        params["mem_gb"] = opts.slurm_mem_gb
    if opts.slurm_extra:
        params["slurm_additional_parameters"] = dict(opts.slurm_extra)
    executor.update_parameters(**params)
    return _submitit_launch(executor, runners, opts, echo, "submitit")


@LAUNCHERS.register("submitit-local")
def submitit_local_launcher(runners: Sequence[JobRunner], opts: LaunchConfig,
                            echo: Echo) -> list[JobOutcome]:
    if not runners:
        return []
    submitit = _import_submitit()
    executor = submitit.LocalExecutor(folder=_submitit_folder(runners, opts))
    executor.update_parameters(timeout_min=opts.timeout_min,
                               gpus_per_node=len(opts.gpus) if opts.gpus else 0)
    return _submitit_launch(executor, runners, opts, echo, "submitit-local")


def _import_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise ImportError("the submitit launchers need submitit: pip install 'dgmoe[slurm]'") from None
    return submitit


# --- the sweep entry point ------------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchReport:
    states_before: dict[JobState, int]
    launched: int
    outcomes: list[JobOutcome]


RELAUNCHABLE = (JobState.NOT_LAUNCHED, JobState.INCOMPLETE, JobState.FAILED)


def launch_sweep(jobs: Sequence[Job], launcher: str, opts: LaunchConfig = LaunchConfig(),
                 echo: Echo = print, relaunch_queued: bool = False, seed: int = 0) -> LaunchReport:
    """Launch the jobs of a sweep that are not done, running or queued (see module docstring)."""
    launch_fn = LAUNCHERS.get(launcher)
    if not jobs:
        raise ValueError("the sweep has no jobs")
    if launcher != "dummy":  # one launch may span several sweep folders (a recipe's parts): a manifest each
        for output_dir in sorted({j.output_dir for j in jobs}):
            write_manifest([j for j in jobs if j.output_dir == output_dir], output_dir)
    relaunch = RELAUNCHABLE + ((JobState.QUEUED,) if relaunch_queued else ())
    states = {j.job_id: state.job_state(j.dir) for j in jobs}
    counts = state.count_states(states.values())
    todo = [j for j in shuffled(jobs, seed) if states[j.job_id] in relaunch]
    skipped = ", ".join(f"{counts[s]} {s.value}" for s in JobState if s not in relaunch and counts[s])
    echo(f"{len(jobs)} job(s): launching {len(todo)} with `{launcher}`"
         + (f"; skipping {skipped}" if skipped else ""))
    runners = [JobRunner(j.config, opts.train_command, launcher, opts.heartbeat_s, title=j.describe())
               for j in todo]
    outcomes = launch_fn(runners, opts, echo) if runners else []
    return LaunchReport(counts, len(runners), outcomes)
