"""The configs of the sweep commands: what `dgmoe sweep launch` sweeps over (`SweepConfig`) and where its jobs
run (`LaunchConfig`, also `dgmoe recipe launch`'s), the commands that inspect a sweep rather than describe one
(`dgmoe sweep status`, `delete-incomplete`, `estimate`) and `dgmoe soup`; their options are generated from these
fields (`dgmoe.cli.options`). Light: imports no torch."""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dgmoe.devices import device_setting
from dgmoe.engine.config import RunConfig
from dgmoe.settings import ConfigError, Settings, comma_floats, comma_ints, existing_folder, setting
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


#: the soups `dgmoe soup` makes (`dgmoe.sweep.soup`)
METHODS = ("uniform", "greedy", "ratatouille", "ensemble", "wise-ft")
#: what `dgmoe soup` makes by default (WiSE-FT needs --zero-shot)
DEFAULT_METHODS = METHODS[:4]
#: WiSE-FT's alpha grid (mlfoundations/wise-ft README: --alpha 0 0.1 ... 1.0)
WISE_FT_ALPHAS = tuple(round(0.1 * k, 1) for k in range(11))


@dataclass(frozen=True)
class SoupConfig(Settings):
    """How `make_soups` reads, evaluates and writes (`dgmoe soup`)."""

    methods: tuple[str, ...] = setting(DEFAULT_METHODS, "Soups to make (repeat the flag or give a comma "
                                       "list; default: the first four). uniform/greedy/ensemble average the hparams "
                                       "draws of one (dataset, held-out domains, trial seed, algorithm, model); "
                                       "ratatouille the runs of any algorithm that share an initialisation; wise-ft "
                                       "interpolates --zero-shot's weights and each fine-tuned run's over --alpha.",
                                       choices=METHODS, flags=("--method",))
    which: str = setting("best", "Each run's weights: best (training-domain validation within the run) or last.",
                         choices=("best", "last"), flags=("--weights",))
    partial: bool = setting(False, "Make the soups even when run folders under RUNS_DIR cannot be members (still "
                                   "training, unfinished, unreadable): each soup of their group names them in its "
                                   "record and reads 'partial' in tables. Without it such folders stop the command.",
                            flags=("--partial",))
    device: str = device_setting("of the evaluations")
    data_dir: str | None = setting(None, "Dataset root (default: each run's own --data-dir).")
    eval_batch_size: int = setting(64, "Batch size of the evaluations.", minimum=1)
    num_workers: int = setting(0, "Data-loading worker processes of the evaluations.", minimum=0)
    zero_shot: str | None = setting(None, "With --method wise-ft: the zero-shot run folder (e.g. `dgmoe train --head "
                                          "zeroshot --steps 0`), theta_0 of WiSE-FT.", parser=existing_folder,
                                    metavar="RUN_DIR")
    alphas: tuple[float, ...] = setting(WISE_FT_ALPHAS, "With --method wise-ft: the mixing coefficients, a comma "
                                                        "list in [0, 1] (0: the zero-shot run, 1: the fine-tuned run).",
                                        parser=comma_floats, flags=("--alpha",))

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [a for a in self.alphas if not 0.0 <= a <= 1.0]
        if bad or not self.alphas:
            raise ConfigError(f"--alpha: WiSE-FT's mixing coefficients lie in [0, 1], got {bad[0] if bad else 'none'}")
        if ("wise-ft" in self.methods) != (self.zero_shot is not None):
            raise ConfigError("--method wise-ft and --zero-shot RUN_DIR go together: WiSE-FT interpolates the "
                              "zero-shot run's weights and each fine-tuned run's")


@dataclass(frozen=True)
class SoupRunConfig(Settings):
    """`dgmoe soup RUNS_DIR`: which runs, where the soups go."""

    runs_dir: str = setting("", "A sweep's runs folder.", argument=True, required=True, parser=existing_folder)
    out_dir: str | None = setting(None, "Where the soups' run folders go (default: RUNS_DIR/soups, so `dgmoe results "
                                        "RUNS_DIR` lists them as rows of their own).", flags=("--out",))


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
