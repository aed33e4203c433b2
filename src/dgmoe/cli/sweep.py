"""`dgmoe sweep`: launch a DomainBed job grid, watch it, clean it up, estimate its cost."""
from __future__ import annotations

import json
import shlex
from typing import Any, Callable

import click

from dgmoe.cli.options import INDEX_LIST, LIST_HINT, ListFlagsGroup, given_settings, run_options, spread_lists
from dgmoe.engine.config import RunConfig
from dgmoe.errors import DgmoeError, UsageError
from dgmoe.settings import flag
from dgmoe.sweep.jobs import DEFAULT_TRAIN_COMMAND, GRID_KEYS, SweepConfig, build_jobs, check_sweep
from dgmoe.sweep.launchers import LAUNCHERS, LaunchOptions


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    """Accept both `--datasets A B` style repeats and comma lists: ('A,B', 'C') -> ('A', 'B', 'C')."""
    return tuple(v for value in values for v in value.split(",") if v)


def _parse_pairs(values: tuple[str, ...], option: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in values:
        name, sep, num = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name] = float(num)
        except ValueError:
            raise click.BadParameter(f"expected NAME=SECONDS, got {item!r}", param_hint=option) from None
    return out


#: where and how jobs run: options of `dgmoe sweep launch` and `dgmoe recipe launch` (`launch_options` reads them)
_LAUNCHER_OPTIONS = [
    click.option("--launcher", default="local",
                 help=f"One of {', '.join(LAUNCHERS.names())}. dummy: print the jobs; local: a pool on this machine; "
                      "submitit: Slurm (a job array); submitit-local: submitit's local executor."),
    click.option("--max-workers", default=1, help="local: jobs at once."),
    click.option("--gpus", default=None, help="local: comma list of GPU ids, one job per GPU at a time."),
    click.option("--train-command", default=None,
                 help="Command that trains one job, called as `<command> --config <job>/job.json` "
                      "[python -m dgmoe train]."),
    click.option("--seed", default=0, help="Seed of the launch order shuffle (not of the runs)."),
    click.option("--relaunch-queued", is_flag=True,
                 help="Also relaunch jobs marked queued (e.g. a lost Slurm array)."),
    click.option("--no-wait", is_flag=True, help="submitit: return after submitting."),
    click.option("--slurm-partition", default=None, help="Slurm partition [the cluster's default]."),
    click.option("--slurm-gpus-per-node", default=1, help="GPUs per job."),
    click.option("--slurm-cpus-per-task", default=8, help="CPU cores per job."),
    click.option("--slurm-mem-gb", type=float, default=None, help="Memory per job in GB [the cluster's default]."),
    click.option("--slurm-array-parallelism", default=64, help="Jobs of the array running at once."),
    click.option("--slurm-extra", default=None, help='More sbatch settings as JSON, e.g. \'{"account": "abc"}\'.'),
    click.option("--timeout-min", default=24 * 60, help="Per-job time limit in minutes (Slurm requeues the job)."),
    click.option("--submitit-cluster", default=None, type=click.Choice(["slurm", "local", "debug"]),
                 help="submitit: the executor [Slurm when found, else local]."),
]


def launcher_options(fn: Callable) -> Callable:
    """Add the launcher options (`_LAUNCHER_OPTIONS`) to a click command."""
    for option in reversed(_LAUNCHER_OPTIONS):
        fn = option(fn)
    return fn


def launch_options(kw: dict[str, Any]) -> LaunchOptions:
    """The `LaunchOptions` of the launcher options' values in `kw` (a bad value raises ValueError)."""
    gpus = tuple(int(g) for g in str(kw["gpus"]).split(",") if g) if kw["gpus"] else None
    extra = json.loads(kw["slurm_extra"]) if kw["slurm_extra"] else {}
    return LaunchOptions(
        train_command=tuple(shlex.split(kw["train_command"])) if kw["train_command"] else DEFAULT_TRAIN_COMMAND,
        max_workers=kw["max_workers"], gpus=gpus, wait=not kw["no_wait"],
        slurm_partition=kw["slurm_partition"], slurm_gpus_per_node=kw["slurm_gpus_per_node"],
        slurm_cpus_per_task=kw["slurm_cpus_per_task"], slurm_mem_gb=kw["slurm_mem_gb"],
        slurm_array_parallelism=kw["slurm_array_parallelism"], timeout_min=kw["timeout_min"],
        slurm_extra=extra, submitit_cluster=kw["submitit_cluster"])


@click.group("sweep", cls=ListFlagsGroup)
def command() -> None:
    """DomainBed sweeps: trial x dataset x algorithm x model x test envs x hparams seed."""


#: the run settings `dgmoe sweep launch` takes as flags of its own (DomainBed's sweep.py has them); any other
#: `dgmoe train` flag goes after `--`
SWEEP_RUN_KEYS = ("data_dir", "steps", "checkpoint_freq", "hparams", "img_size", "patch_size", "holdout_fraction")


def _names_of(command: click.Command) -> set[str]:
    return {n for p in command.params for n in (*p.opts, *p.secondary_opts)}


class TrainFlagsAfterDash(click.Command):
    """A launch command whose positional arguments are `dgmoe train` flags given after `--`: a train flag
    given before `--`, a stray word, or a launch option after `--` is refused with a message naming the side
    of `--` it belongs on."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from dgmoe.cli.train import command as train

        ctx.meta["dgmoe.dash"] = "--" in args
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as err:
            if err.option_name in _names_of(train):
                raise click.UsageError(f"{err.option_name} is a `dgmoe train` flag: give it after `--` "
                                       f"({ctx.command_path} ... -- {err.option_name} VALUE)", ctx) from None
            raise


def train_flags(flags: tuple[str, ...], legacy: tuple[str, str] = ("", ""),
                ctx: click.Context | None = None) -> tuple[dict, RunConfig | None]:
    """The run settings given after `--` (and in the old --train-args/--exec-args strings), parsed by
    `dgmoe train`'s own options: (flat settings, the --config base or None). `ctx`, the launch command's
    context, names the side of `--` a misplaced flag belongs on."""
    from dgmoe.cli.train import command as train

    if ctx is not None and flags and not ctx.meta.get("dgmoe.dash"):
        raise UsageError(f"unexpected argument {flags[0]!r} before `--`; `dgmoe train` flags go after `--`, list "
                         f"flags take their values {LIST_HINT}")
    argv = spread_lists(train.params, [token for text in legacy for token in shlex.split(text)] + list(flags))
    own = _names_of(ctx.command) if ctx is not None else set()
    try:
        ctx_train = train.make_context("dgmoe train", argv, resilient_parsing=False)
    except click.NoSuchOption as err:
        if err.option_name in own:
            where = ctx.command_path if ctx is not None else "dgmoe sweep launch"
            raise UsageError(f"{err.option_name} is an option of `{where}`, not a `dgmoe train` flag: give it "
                             "before `--`") from None
        raise UsageError(f"{err.option_name} after `--` is not a `dgmoe train` flag"
                         + (f" (did you mean {', '.join(err.possibilities)}?)" if err.possibilities else "")) from None
    except click.ClickException as err:
        raise UsageError(f"the `dgmoe train` flags after `--`: {err.format_message()}") from None
    settings = given_settings(ctx_train, ctx_train.params)
    grid = [k for k in settings if k in GRID_KEYS]
    if grid:
        raise UsageError(f"{flag(grid[0])} after `--` is set by the sweep for each job (use --datasets, "
                         "--algorithms, --models, --n-hparams, --n-trials, --only-test-envs, --output-dir)")
    if ctx_train.params.get("print_config"):
        raise UsageError("--print-config is not a sweep setting; use the dummy launcher to see the jobs")
    base = RunConfig.from_file(ctx_train.params["config_file"]) if ctx_train.params.get("config_file") else None
    return settings, base


@command.command("launch", cls=TrainFlagsAfterDash, context_settings={"show_default": True})
@click.option("--datasets", multiple=True, required=True, help=f"Dataset names ({LIST_HINT}).")
@click.option("--algorithms", multiple=True, required=True, help=f"Algorithm names ({LIST_HINT}).")
@click.option("--models", multiple=True, required=True, help=f"Backbone names ({LIST_HINT}).")
@click.option("--output-dir", "--output_dir", required=True, help="Sweep directory; one sub-directory per job.")
@click.option("--n-hparams", "--n_hparams", default=20, help="Hparam draws per cell (seed 0 = defaults).")
@click.option("--n-hparams-from", "--n_hparams_from", default=0, help="First hparams seed.")
@click.option("--n-trials", "--n_trials", default=3, help="Trial seeds 0..n-1.")
@click.option("--single-test-envs", "--single_test_envs", is_flag=True,
              help="Only single held-out domains (no pairs for leave-one-domain-out selection).")
@click.option("--only-test-envs", "--only_test_envs", multiple=True, type=INDEX_LIST,
              help=f"Keep only held-out sets within these domains ({LIST_HINT}; e.g. an ablation on one domain).")
@click.option("--shared-init", is_flag=True,
              help="One run seed per dataset and trial (DomainBed: one per job), so that every hparams draw and "
              "algorithm starts from the same initialisation and `dgmoe soup` can average them.")
@run_options(only=SWEEP_RUN_KEYS)
@click.option("--train-args", default="", hidden=True, help="Old spelling of the flags after `--`.")
@click.option("--exec-args", default="", hidden=True, help="Old spelling of the flags after `--`.")
@launcher_options
@click.argument("train_flags_", nargs=-1, type=click.UNPROCESSED, metavar="[-- DGMOE_TRAIN_FLAGS...]")
@click.pass_context
def launch(ctx: click.Context, train_flags_: tuple[str, ...], **kw: Any) -> None:
    """Launch every job that is not done, running or queued; failed and incomplete jobs resume.

    Any other `dgmoe train` flag goes after `--` and applies to every job, e.g.
    `-- --n-per-domain 64 --device cuda --model-kwargs '{"depth": 6}'` (or `-- --config base.json` to start
    from a saved run). Settings that change results are part of each job's id; paths, device and logging are not.
    """
    from dgmoe.sweep.launchers import launch_sweep

    settings, base = train_flags(train_flags_, (kw["train_args"], kw["exec_args"]), ctx)
    settings.update(given_settings(ctx, kw, only=SWEEP_RUN_KEYS))
    try:
        cfg = SweepConfig(
            datasets=_split(kw["datasets"]), algorithms=_split(kw["algorithms"]), models=_split(kw["models"]),
            output_dir=kw["output_dir"], base=RunConfig.from_flat(settings, base=base),
            n_hparams=kw["n_hparams"], n_hparams_from=kw["n_hparams_from"], n_trials=kw["n_trials"],
            single_test_envs=kw["single_test_envs"], only_test_envs=tuple(kw["only_test_envs"]),
            shared_init=kw["shared_init"])
        opts = launch_options(kw)
        check_sweep(cfg)
        jobs = build_jobs(cfg)
        _warn_wilds_seeds(cfg)
        report = launch_sweep(jobs, kw["launcher"], opts, echo=click.echo,
                              relaunch_queued=kw["relaunch_queued"], seed=kw["seed"])
    except (ValueError, KeyError, ImportError, json.JSONDecodeError) as err:
        raise UsageError(str(err)) from None
    failed = [o for o in report.outcomes if o.outcome == "failed"]
    if failed:
        raise DgmoeError(f"{len(failed)} job(s) failed; see `dgmoe sweep status --output-dir {cfg.output_dir} "
                         "--verbose`")


@command.command("status")
@click.option("--output-dir", required=True, help="The sweep directory.")
@click.option("--verbose", "-v", is_flag=True, help="List every job with its state.")
def status(output_dir: str, verbose: bool) -> None:
    """Counts of done / running / failed / queued / incomplete / not launched jobs."""
    from dgmoe.sweep.status import format_status, sweep_status

    unreadable: list[str] = []
    try:
        click.echo(format_status(sweep_status(output_dir, unreadable), verbose=verbose))
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    for folder in unreadable:
        click.echo(f"warning: cannot read {folder}: its state is unknown, left out of the counts", err=True)


@command.command("delete-incomplete")
@click.option("--output-dir", required=True, help="The sweep directory.")
@click.option("--keep-failed", is_flag=True, help="Delete only incomplete jobs, keep failed ones.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete_incomplete_cmd(output_dir: str, keep_failed: bool, yes: bool) -> None:
    """Delete incomplete (and failed) job directories so they restart from scratch; lists them first."""
    from dgmoe.sweep.status import delete_incomplete, unfinished_jobs

    try:
        doomed = unfinished_jobs(output_dir, include_failed=not keep_failed)
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    if not doomed:
        click.echo(f"no incomplete{'' if keep_failed else ' or failed'} job in {output_dir}; nothing to delete")
        return
    for s in doomed:
        click.echo(f"{s.state.value:>12}  {s.job_id}  {s.description or '(not in sweep.json)'}")
    if not yes:
        click.confirm(f"Delete these {len(doomed)} job folder(s) (their records and checkpoints)?", abort=True)
    deleted = delete_incomplete(output_dir, include_failed=not keep_failed, job_ids=[s.job_id for s in doomed])
    click.echo(f"deleted {len(deleted)} job folder(s)")


@command.command("estimate")
@click.option("--step-time", "step_times", multiple=True, required=True,
              help="MODEL=SECONDS per training step of --ref-images images (repeat per model).")
@click.option("--eval-time", "eval_times", multiple=True,
              help="MODEL=SECONDS per inference batch of --ref-images images (default: 1/3 of the step).")
@click.option("--ref-images", default=160, show_default=True, help="Images per measured step.")
@click.option("--algorithms", multiple=True, default=("ERM",), show_default=True, help=f"({LIST_HINT})")
@click.option("--n-hparams", default=1, show_default=True)
@click.option("--n-trials", default=3, show_default=True)
@click.option("--with-pairs", is_flag=True, help="Add test-env pairs (leave-one-domain-out selection).")
@click.option("--job-overhead-s", default=60.0, show_default=True, help="Start-up cost per job.")
@click.option("--gpus", "gpu_counts", multiple=True, type=int, default=(1, 8, 64), show_default=True)
def estimate(step_times: tuple[str, ...], eval_times: tuple[str, ...], ref_images: int,
             algorithms: tuple[str, ...], n_hparams: int, n_trials: int, with_pairs: bool,
             job_overhead_s: float, gpu_counts: tuple[int, ...]) -> None:
    """GPU-hours and wall-clock of the GMoE study (5 datasets, DomainNet 15k steps)."""
    from dgmoe.sweep.estimate import estimate_study, format_estimate

    try:
        est = estimate_study(
            _parse_pairs(step_times, "--step-time"), eval_time_s=_parse_pairs(eval_times, "--eval-time"),
            ref_images=ref_images, algorithms=_split(algorithms), n_hparams=n_hparams,
            n_trials=n_trials, single_test_envs=not with_pairs, job_overhead_s=job_overhead_s,
            gpus=gpu_counts)
    except ValueError as err:
        raise UsageError(str(err)) from None
    click.echo(format_estimate(est))


def _warn_wilds_seeds(cfg: SweepConfig) -> None:
    """A line for each WILDS dataset swept with fewer trial seeds than WILDS asks for (3; Camelyon17 10)."""
    from dgmoe.data.catalogue import evaluation_envs
    from dgmoe.report.wilds import required_seeds

    for dataset in cfg.datasets:
        need = required_seeds(dataset)
        if evaluation_envs(dataset) and cfg.n_trials < need:
            click.echo(f"warning: {dataset}: --n-trials {cfg.n_trials}; WILDS asks for {need} seeds for leaderboard "
                       "numbers", err=True)
