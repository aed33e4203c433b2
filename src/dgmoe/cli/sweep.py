"""`dgmoe sweep`: launch a DomainBed job grid, watch it, clean it up, estimate its cost."""
from __future__ import annotations

import json
import shlex
from typing import Any, Callable

import click

from dgmoe.cli.options import (
    LIST_HINT,
    ListFlagsGroup,
    build_config,
    config_file_options,
    config_options,
    given_settings,
    print_config,
    run_options,
    spread_lists,
)
from dgmoe.engine.config import RunConfig
from dgmoe.errors import DgmoeError, UsageError
from dgmoe.settings import flag
from dgmoe.sweep.config import DeleteConfig, EstimateConfig, LaunchConfig, StatusConfig, SweepConfig
from dgmoe.sweep.jobs import GRID_KEYS, build_jobs, check_sweep


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


def launcher_options(fn: Callable) -> Callable:
    """Add the launcher options (generated from `LaunchConfig`) to a click command."""
    return config_options(LaunchConfig)(fn)


def launch_options(ctx: click.Context, kw: dict[str, Any]) -> LaunchConfig:
    """The `LaunchConfig` the launcher options given describe."""
    return build_config(LaunchConfig, ctx, kw)


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
@config_file_options("sweep")
@config_options(SweepConfig, click_required=False)
@run_options(only=SWEEP_RUN_KEYS)
@click.option("--train-args", default="", hidden=True, help="Old spelling of the flags after `--`.")
@click.option("--exec-args", default="", hidden=True, help="Old spelling of the flags after `--`.")
@launcher_options
@click.argument("train_flags_", nargs=-1, type=click.UNPROCESSED, metavar="[-- DGMOE_TRAIN_FLAGS...]")
@click.pass_context
def launch(ctx: click.Context, train_flags_: tuple[str, ...], config_file: str | None, **kw: Any) -> None:
    """Launch every job that is not done, running or queued; failed and incomplete jobs resume.

    Any other `dgmoe train` flag goes after `--` and applies to every job, e.g.
    `-- --n-per-domain 64 --device cuda --model-kwargs '{"depth": 6}'` (or `-- --config base.json` to start
    from a saved run). Settings that change results are part of each job's id; paths, device and logging are not.
    `--print-config` writes the sweep (grid and base run) as JSON; `--config FILE` launches it again.
    """
    from dgmoe.sweep.launchers import launch_sweep

    start = SweepConfig.from_file(config_file) if config_file else None
    settings, run_file = train_flags(train_flags_, (kw["train_args"], kw["exec_args"]), ctx)
    settings.update(given_settings(ctx, kw, only=SWEEP_RUN_KEYS))
    run_start = run_file or (start.base if start is not None else None)
    cfg = build_config(SweepConfig, ctx, kw, start, base=RunConfig.from_flat(settings, base=run_start))
    if kw["print_config"]:
        print_config(cfg)
        return
    opts = launch_options(ctx, kw)
    try:
        check_sweep(cfg)
        jobs = build_jobs(cfg)
        _warn_wilds_seeds(cfg)
        report = launch_sweep(jobs, opts.launcher, opts, echo=click.echo, relaunch_queued=opts.relaunch_queued,
                              seed=opts.seed)
    except (ValueError, KeyError, ImportError, json.JSONDecodeError) as err:
        raise UsageError(str(err)) from None
    failed = [o for o in report.outcomes if o.outcome == "failed"]
    if failed:
        raise DgmoeError(f"{len(failed)} job(s) failed; see `dgmoe sweep status --output-dir {cfg.output_dir} "
                         "--verbose`")


@command.command("status")
@config_options(StatusConfig)
@click.pass_context
def status(ctx: click.Context, **kw: Any) -> None:
    """Counts of done / running / failed / queued / incomplete / not launched jobs."""
    from dgmoe.sweep.status import format_status, sweep_status

    cfg = build_config(StatusConfig, ctx, kw)
    unreadable: list[str] = []
    try:
        click.echo(format_status(sweep_status(cfg.output_dir, unreadable), verbose=cfg.verbose))
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    for folder in unreadable:
        click.echo(f"warning: cannot read {folder}: its state is unknown, left out of the counts", err=True)


@command.command("delete-incomplete")
@config_options(DeleteConfig)
@click.pass_context
def delete_incomplete_cmd(ctx: click.Context, **kw: Any) -> None:
    """Delete incomplete (and failed) job directories so they restart from scratch; lists them first."""
    from dgmoe.sweep.status import delete_incomplete, unfinished_jobs

    cfg = build_config(DeleteConfig, ctx, kw)
    output_dir, keep_failed = cfg.output_dir, cfg.keep_failed
    try:
        doomed = unfinished_jobs(output_dir, include_failed=not keep_failed)
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    if not doomed:
        click.echo(f"no incomplete{'' if keep_failed else ' or failed'} job in {output_dir}; nothing to delete")
        return
    for s in doomed:
        click.echo(f"{s.state.value:>12}  {s.job_id}  {s.description or '(not in sweep.json)'}")
    if not cfg.yes:
        click.confirm(f"Delete these {len(doomed)} job folder(s) (their records and checkpoints)?", abort=True)
    deleted = delete_incomplete(output_dir, include_failed=not keep_failed, job_ids=[s.job_id for s in doomed])
    click.echo(f"deleted {len(deleted)} job folder(s)")


@command.command("estimate")
@config_options(EstimateConfig)
@click.pass_context
def estimate(ctx: click.Context, **kw: Any) -> None:
    """GPU-hours and wall-clock of the GMoE study (5 datasets, DomainNet 15k steps)."""
    from dgmoe.sweep.estimate import estimate_document, estimate_study

    cfg = build_config(EstimateConfig, ctx, kw)
    try:
        est = estimate_study(
            _parse_pairs(cfg.step_time, "--step-time"), eval_time_s=_parse_pairs(cfg.eval_time, "--eval-time"),
            ref_images=cfg.ref_images, algorithms=cfg.algorithms, n_hparams=cfg.n_hparams,
            n_trials=cfg.n_trials, single_test_envs=not cfg.with_pairs, job_overhead_s=cfg.job_overhead_s,
            gpus=cfg.gpus)
    except ValueError as err:
        raise UsageError(str(err)) from None
    click.echo(estimate_document(est).markdown(), nl=False)


def _warn_wilds_seeds(cfg: SweepConfig) -> None:
    """A line for each WILDS dataset swept with fewer trial seeds than WILDS asks for (3; Camelyon17 10)."""
    from dgmoe.data.catalogue import evaluation_envs
    from dgmoe.report.wilds import required_seeds

    for dataset in cfg.datasets:
        need = required_seeds(dataset)
        if evaluation_envs(dataset) and cfg.n_trials < need:
            click.echo(f"warning: {dataset}: --n-trials {cfg.n_trials}; WILDS asks for {need} seeds for leaderboard "
                       "numbers", err=True)
