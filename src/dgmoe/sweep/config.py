"""The configs of the sweep commands: what `dgmoe sweep launch` sweeps over (`SweepConfig`) and where its jobs
run (`LaunchConfig`, also `dgmoe recipe launch`'s), the commands that inspect a sweep rather than describe one
(`dgmoe sweep status`, `delete-incomplete`, `estimate`) and `dgmoe soup`; their options are generated from these
fields (`dgmoe.cli.options`). Light: imports no torch."""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dgmoe.engine.config import RunConfig
from dgmoe.settings import ConfigError, Settings, comma_ints, setting
from dgmoe.sweep import state

#: how a job trains unless `--train-command` says otherwise
DEFAULT_TRAIN_COMMAND: tuple[str, ...] = (sys.executable, "-m", "dgmoe", "train")


@dataclass(frozen=True)
class StatusConfig(Settings):
    """`dgmoe sweep status`."""

    output_dir: str = setting("", "The sweep directory.", required=True)
    verbose: bool = setting(False, "List every job with its state.", flags=("--verbose", "-v"))


@dataclass(frozen=True)
class DeleteConfig(Settings):
    """`dgmoe sweep delete-incomplete`."""

    output_dir: str = setting("", "The sweep directory.", required=True)
    keep_failed: bool = setting(False, "Delete only incomplete jobs, keep failed ones.", flags=("--keep-failed",))
    yes: bool = setting(False, "Do not ask for confirmation.", flags=("--yes", "-y"))


@dataclass(frozen=True)
class EstimateConfig(Settings):
    """`dgmoe sweep estimate`: the cost of the GMoE study from measured step times
    (`dgmoe.sweep.estimate.estimate_study`)."""

    step_time: tuple[str, ...] = setting((), "MODEL=SECONDS per training step of --ref-images images (repeat per "
                                             "model).", required=True)
    eval_time: tuple[str, ...] = setting((), "MODEL=SECONDS per inference batch of --ref-images images (default: "
                                             "1/3 of the step).")
    ref_images: int = setting(160, "Images per measured step.", minimum=1)
    algorithms: tuple[str, ...] = setting(("ERM",), "", commas=True)
    n_hparams: int = setting(1, "Hparam draws per cell.", minimum=1)
    n_trials: int = setting(3, "Trial seeds.", minimum=1)
    with_pairs: bool = setting(False, "Add test-env pairs (leave-one-domain-out selection).", flags=("--with-pairs",))
    job_overhead_s: float = setting(60.0, "Start-up cost per job.", minimum=0)
    gpus: tuple[int, ...] = setting((1, 8, 64), "GPU counts to report the wall-clock for.", minimum=1)


@dataclass(frozen=True)
class SweepConfig(Settings):
    """What `dgmoe sweep launch` sweeps over (DomainBed's `sweep.py` flags, plus `models`).

    `base` holds every other run setting, shared by all jobs (steps, image size, hparams overrides, data dir,
    device, ...); the grid sets its dataset, algorithm, model, test envs, seeds and output dir per job.
    `dgmoe sweep launch` generates its options from these fields; `--print-config` writes this config and
    `--config` reads it back.
    """

    DOMAINBED_FLAGS: ClassVar[bool] = True

    datasets: tuple[str, ...] = setting((), "Dataset names.", required=True, commas=True)
    algorithms: tuple[str, ...] = setting((), "Algorithm names.", required=True, commas=True)
    models: tuple[str, ...] = setting((), "Backbone names.", required=True, commas=True)
    output_dir: str = setting("", "Sweep directory; one sub-directory per job.", required=True)
    base: RunConfig = field(default_factory=RunConfig)
    n_hparams: int = setting(20, "Hparam draws per cell (seed 0 = defaults).", minimum=1)
    n_hparams_from: int = setting(0, "First hparams seed.", minimum=0)
    n_trials: int = setting(3, "Trial seeds 0..n-1.", minimum=1)
    single_test_envs: bool = setting(False, "Only single held-out domains (no pairs for leave-one-domain-out "
                                            "selection).")
    only_test_envs: tuple[int, ...] = setting((), "Keep only held-out sets within these domains (e.g. an ablation "
                                                  "on one domain).", minimum=0)
    test_env_sets: tuple[tuple[int, ...], ...] = setting(
        (), "Explicit held-out sets instead of DomainBed's singles (and pairs), each a comma list, e.g. every "
            "domain but one for single-source runs (GMoE Tables 3 and 12); a dataset with evaluation-only domains "
            "keeps those.")
    shared_init: bool = setting(False, "One run seed per dataset and trial (DomainBed: one per job), so that every "
                                       "hparams draw and algorithm starts from the same initialisation and `dgmoe "
                                       "soup` can average them (DiWA).")

    def __post_init__(self) -> None:
        super().__post_init__()
        for envs in self.test_env_sets:
            if not envs or len(set(envs)) != len(envs) or min(envs) < 0:
                raise ConfigError(f"a held-out set must name distinct domain indices >= 0, got {list(envs)}")

    @property
    def data_dir(self) -> str | None:
        return self.base.execution.data_dir


@dataclass(frozen=True)
class LaunchConfig(Settings):
    """Where and how the jobs of a sweep run: the launcher options of `dgmoe sweep launch` and `dgmoe recipe
    launch` (generated from these fields)."""

    launcher: str = setting("local", "One of dummy, local, submitit, submitit-local. dummy: print the jobs; local: a "
                                     "pool on this machine; submitit: Slurm (a job array); submitit-local: submitit's "
                                     "local executor.")
    max_workers: int = setting(1, "local: jobs at once.", minimum=1)
    gpus: tuple[int, ...] | None = setting(None, "local: comma list of GPU ids, one job per GPU at a time.",
                                           parser=comma_ints, minimum=0)
    train_command: tuple[str, ...] = setting(
        DEFAULT_TRAIN_COMMAND, "Command that trains one job, called as `<command> --config <job>/job.json`.",
        parser=shlex.split, shown="python -m dgmoe train")
    seed: int = setting(0, "Seed of the launch order shuffle (not of the runs).", minimum=0)
    relaunch_queued: bool = setting(False, "Also relaunch jobs marked queued (e.g. a lost Slurm array).",
                                    flags=("--relaunch-queued",))
    heartbeat_s: float = setting(state.HEARTBEAT_S, "Seconds between the heartbeats of a running job.", minimum=0,
                                 exclusive_min=True)
    wait: bool = setting(True, "submitit: wait for the jobs to end (--no-wait: return after submitting).")
    slurm_partition: str | None = setting(None, "Slurm partition [the cluster's default].")
    slurm_gpus_per_node: int = setting(1, "GPUs per job.", minimum=0)
    slurm_cpus_per_task: int = setting(8, "CPU cores per job.", minimum=1)
    slurm_mem_gb: float | None = setting(None, "Memory per job in GB [the cluster's default].", minimum=0,
                                         exclusive_min=True)
    slurm_array_parallelism: int = setting(64, "Jobs of the array running at once.", minimum=1)
    timeout_min: int = setting(24 * 60, "Per-job time limit in minutes (Slurm requeues the job).", minimum=1)
    slurm_extra: dict[str, Any] = setting({}, 'More sbatch settings as JSON, e.g. \'{"account": "abc"}\' (Slurm\'s '
                                              "slurm_additional_parameters).")
    submitit_folder: str | None = setting(None, "submitit: folder of its logs [<output-dir>/.submitit].")
    submitit_cluster: str | None = setting(None, "submitit: the executor [Slurm when found, else local].",
                                           choices=("slurm", "local", "debug"))
