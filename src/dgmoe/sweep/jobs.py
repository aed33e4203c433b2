"""The sweep job grid, DomainBed style (`scripts/sweep.py`), with backbones as one more axis.

A sweep is the product trial x dataset x algorithm x model x test-env set x hparams seed over one base
`RunConfig`. Every job is a `RunConfig`; its directory is `output_dir/<job id>`, the job id being the md5 of
the run's identity (`RunConfig.identity_hash`), so launching the same grid twice finds the same directories
and skips what is finished.

Two deliberate choices:
- the run seed is DomainBed's `seed_hash(dataset, algorithm, test_envs, hparams_seed, trial_seed)`, which
  leaves the model out: backbones compared under one (algorithm, hparams seed, trial) share data order
  and split, a paired comparison;
- the job id covers what changes a run's results (every section of the run but `execution`) and leaves out
  where files live and how a run executes (data dir, device, workers, logging), so moving the data or
  changing the GPU type does not orphan finished runs.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import write_json_atomic
from dgmoe.seeding import seed_hash
from dgmoe.sweep.config import DEFAULT_TRAIN_COMMAND, SweepConfig

MANIFEST_NAME = "sweep.json"
MANIFEST_LOCK = ".sweep.json.lock"
MANIFEST_VERSION = 2
#: the run settings each job takes from the grid; a sweep's base config cannot set them
GRID_KEYS = ("dataset", "algorithm", "model", "test_envs", "hparams_seed", "trial_seed", "seed", "output_dir")


@dataclass(frozen=True)
class Job:
    """One training run of the sweep: its config (whose output dir is `dir`) and its id."""

    config: RunConfig
    job_id: str
    output_dir: str  # the sweep's directory; the job's own is `self.dir`

    @property
    def dir(self) -> Path:
        return Path(self.output_dir) / self.job_id

    def command(self, train_command: Sequence[str] = DEFAULT_TRAIN_COMMAND) -> list[str]:
        """The equivalent `dgmoe train` command line, with every setting that differs from the defaults
        (what the dummy launcher prints; launchers run `train_command --config <job>/job.json`)."""
        return [*train_command, *self.config.to_argv(always=GRID_KEYS)]

    def describe(self) -> str:
        c = self.config
        envs = ",".join(str(e) for e in c.data.test_envs)
        return (f"{c.data.dataset} {c.algorithm.name} {c.model.name} test_envs={envs} "
                f"hparams_seed={c.seeds.hparams_seed} trial={c.seeds.trial_seed}")


def make_job(config: RunConfig, output_dir: str | os.PathLike) -> Job:
    """The job running `config` in the sweep directory `output_dir`, named by the run's identity."""
    job_id = config.identity_hash()
    return Job(config.replace(output_dir=str(Path(output_dir) / job_id)), job_id, str(output_dir))


def held_out_env_sets(n_domains: int, single_test_envs: bool = False) -> list[list[int]]:
    """Held-out domain sets: every single domain, and every pair when there are >= 3 domains.

    Pairs feed leave-one-domain-out selection (one test and one validation domain); with fewer than
    3 domains a pair would leave one training domain or none, so only singles are produced. Order is
    DomainBed's: [0], [0, 1], [0, 2], ..., [1], [1, 2], ...
    """
    if n_domains < 2:
        raise ValueError(f"domain generalization needs >= 2 domains, got {n_domains}")
    sets: list[list[int]] = []
    for i in range(n_domains):
        sets.append([i])
        if not single_test_envs and n_domains >= 3:
            sets.extend([i, j] for j in range(i + 1, n_domains))
    return sets


def count_domains(dataset: str, data_dir: str | Path | None) -> int:
    """Number of domains of `dataset`: the catalogue's list, else the domain folders on disk.

    Catalogue entries without a fixed domain list (`ImageFolder`, custom folders) count the
    sub-directories of their root, as DomainBed's ImageFolder datasets define their domains as the
    sorted sub-directory names.
    """
    from dgmoe.data import UnknownDatasetError, get_spec
    from dgmoe.data.catalogue import dataset_root

    try:
        spec = get_spec(dataset)
    except UnknownDatasetError as err:
        raise ValueError(f"--datasets: {err}") from None
    if spec.domains:
        return len(spec.domains)
    root = dataset_root(spec, data_dir)
    domains = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if len(domains) < 2:
        raise ValueError(f"{root} has {len(domains)} domain folder(s); domain generalization needs >= 2")
    return len(domains)


def check_sweep(cfg: SweepConfig) -> None:
    """Fail before launching anything on an unknown dataset, algorithm or model, or hparam overrides or model
    kwargs that some cell of the grid rejects."""
    from dgmoe.algorithms import get_algorithm
    from dgmoe.engine.build import model_build
    from dgmoe.engine.hparams import run_hparams
    from dgmoe.models import MODELS
    from dgmoe.registry import UnknownNameError

    for option, names, lookup in (("--algorithms", cfg.algorithms, get_algorithm),
                                  ("--models", cfg.models, MODELS.get)):
        for name in names:
            try:
                lookup(name)
            except UnknownNameError as err:
                raise ValueError(f"{option}: {err}") from None
    for name in cfg.models:  # (adapter experts bring their balance-loss weight into the hyperparameters)
        build = model_build(cfg.base.replace(model=name))
        try:
            info = build.describe()
        except (TypeError, ValueError, ZeroDivisionError, RuntimeError) as err:
            raise ValueError(f"--models {name} cannot be built with {build.kwargs}: {err}") from None
        for dataset in cfg.datasets:
            for algorithm in cfg.algorithms:
                try:
                    run_hparams(algorithm, dataset, info, 0, 0, cfg.base.algorithm.hparams)
                except KeyError as err:
                    raise ValueError(str(err.args[0])) from None
    for dataset in cfg.datasets:
        count_domains(dataset, cfg.data_dir)


def build_jobs(cfg: SweepConfig,
               n_domains: Mapping[str, int] | Callable[[str], int] | None = None) -> list[Job]:
    """All jobs of the sweep in DomainBed's order (trial, dataset, algorithm, model, test envs, hparams).

    `n_domains` maps a dataset to its number of domains; by default `count_domains` looks it up. A dataset
    with evaluation-only domains (FMoW, iWildCam) has one held-out set, those domains.
    """
    from dgmoe.data.catalogue import evaluation_envs

    if n_domains is None:
        lookup: Callable[[str], int] = lambda name: count_domains(name, cfg.data_dir)  # noqa: E731
    elif callable(n_domains):
        lookup = n_domains
    else:
        table = dict(n_domains)
        lookup = table.__getitem__
    # absolute paths: a Slurm job or pool process may start in another working directory
    base = cfg.base
    if cfg.data_dir is not None:
        base = base.replace(data_dir=os.path.abspath(os.path.expanduser(cfg.data_dir)))
    output_dir = os.path.abspath(os.path.expanduser(cfg.output_dir))
    domains = {name: lookup(name) for name in cfg.datasets}
    jobs = []
    hparam_seeds = range(cfg.n_hparams_from, cfg.n_hparams_from + cfg.n_hparams)
    for trial, dataset, algorithm, model in itertools.product(
            range(cfg.n_trials), cfg.datasets, cfg.algorithms, cfg.models):
        fixed = evaluation_envs(dataset)  # WILDS layouts: the evaluation splits are the one held-out set
        sets = [fixed] if fixed else [list(e) for e in cfg.test_env_sets] or held_out_env_sets(
            domains[dataset], cfg.single_test_envs)
        for test_envs in sets:
            if max(test_envs) >= domains[dataset] or len(test_envs) >= domains[dataset]:
                raise ValueError(f"held-out set {test_envs} does not fit {dataset}'s {domains[dataset]} domains "
                                 "(it must leave a training domain)")
            if cfg.only_test_envs and not set(test_envs) <= set(cfg.only_test_envs):
                continue
            for hp_seed in hparam_seeds:
                run = base.replace(dataset=dataset, algorithm=algorithm, model=model, test_envs=tuple(test_envs),
                                   hparams_seed=hp_seed, trial_seed=trial,
                                   seed=seed_hash(dataset, "shared_init", trial) if cfg.shared_init
                                   else seed_hash(dataset, algorithm, test_envs, hp_seed, trial))
                jobs.append(make_job(run, output_dir))
    return jobs


def shuffled(jobs: Sequence[Job], seed: int = 0) -> list[Job]:
    """Jobs in a seeded random order, so a partly finished sweep covers the grid evenly (as DomainBed)."""
    out = list(jobs)
    random.Random(seed).shuffle(out)
    return out


# --- the manifest: the grid recorded next to the runs, so `status` needs only the output dir -------------

class LegacySweepError(ValueError):
    """A sweep directory written by dgmoe < 0.2, whose jobs are named by another hash."""


def write_manifest(jobs: Sequence[Job], output_dir: str | os.PathLike) -> Path:
    """Merge `jobs` into `output_dir/sweep.json` (a union over launches), written atomically, under an exclusive
    `flock` of `.sweep.json.lock` so that simultaneous launches into one folder keep each other's jobs."""
    path = Path(output_dir) / MANIFEST_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent / MANIFEST_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel however its holder ends
        return _merge_manifest(jobs, path, output_dir)
    finally:
        os.close(fd)


def _merge_manifest(jobs: Sequence[Job], path: Path, output_dir: str | os.PathLike) -> Path:
    version, entries = _read_manifest_entries(path)
    if entries and version != MANIFEST_VERSION:
        raise LegacySweepError(
            f"{output_dir} is a sweep of dgmoe < 0.2 (sweep.json version {version}), whose job folders are named "
            "by another hash: launching this grid there would start every job again beside the old ones. Launch "
            "into a new --output-dir; `dgmoe results`, `dgmoe report` and `dgmoe sweep status` still read this one.")
    for job in jobs:
        entries[job.job_id] = {"config": job.config.to_dict()}
    write_json_atomic(path, {"version": MANIFEST_VERSION, "jobs": entries})
    return path


def read_manifest(output_dir: str | os.PathLike) -> list[Job]:
    """The jobs recorded in `output_dir/sweep.json`, in the order of their ids (either manifest version)."""
    path = Path(output_dir) / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {output_dir} is not a sweep directory "
                                "(run `dgmoe sweep launch --output-dir ...` first)")
    version, entries = _read_manifest_entries(path)
    jobs = []
    for job_id, entry in sorted(entries.items()):
        try:
            config = RunConfig.from_dict(entry["config"], strict=False) if version == MANIFEST_VERSION \
                else _legacy_config(entry["args"], entry.get("data_dir"))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: job {job_id} is not readable ({err})") from None
        jobs.append(Job(config.replace(output_dir=str(Path(output_dir) / job_id)), job_id, str(output_dir)))
    return jobs


def _legacy_config(args: Mapping[str, Any], data_dir: str | None) -> RunConfig:
    """The run of a version-1 manifest entry (flat identity arguments; extra flags are not recovered)."""
    keys = RunConfig.keys()
    flat = {k: v for k, v in args.items() if k in keys and v is not None}
    return RunConfig.from_flat(flat, data_dir=data_dir)


def _read_manifest_entries(path: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    if not path.is_file():
        return MANIFEST_VERSION, {}
    try:
        data = json.loads(path.read_text())
        return int(data.get("version", 1)), dict(data["jobs"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path} is not a dgmoe sweep manifest ({err})") from None


def iter_job_dirs(output_dir: str | os.PathLike) -> Iterator[Path]:
    """Job directories present under a sweep directory (32-hex-digit names)."""
    root = Path(output_dir)
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        if p.is_dir() and len(p.name) == 32 and all(c in "0123456789abcdef" for c in p.name):
            yield p
