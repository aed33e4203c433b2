"""`dgmoe recipe`: the seed papers' tables as recipes: list them, show one, launch one as sweeps."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from dgmoe.cli.options import ListFlagsGroup, build_config, config_file_options, config_options, print_config
from dgmoe.cli.sweep import TrainFlagsAfterDash, launch_options, launcher_options, train_flags
from dgmoe.devices import AUTO
from dgmoe.engine.config import ExecutionConfig
from dgmoe.errors import DgmoeError, UsageError
from dgmoe.recipes import get_recipe, list_recipes  # the paper modules load on first use
from dgmoe.recipes.config import RecipeLaunchConfig
from dgmoe.settings import flag, key_of

#: the `dgmoe train` flags a recipe launch passes on (after `--`): where and how jobs execute, never what
#: they compute (the recipe declares that); --data-dir and --output-dir are options of the launch itself
EXECUTION_KEYS = tuple(k for k in (key_of(f) for f in dataclasses.fields(ExecutionConfig))
                       if k not in ("output_dir", "data_dir"))


@click.group("recipe", cls=ListFlagsGroup)
def command() -> None:
    """The seed papers' tables as recipes (GMoE, SF-MoE, MoGE): `list`, `show NAME`, `launch NAME`; then
    `dgmoe results DIR --recipe NAME` prints the obtained numbers beside the paper's."""


@command.command("list")
def list_cmd() -> None:
    """Every recipe: its paper and table, kind, the rows dgmoe runs, what it measures."""
    from dgmoe.recipes.describe import list_table

    click.echo(list_table(list_recipes()))


@command.command("show")
@config_options(RecipeLaunchConfig, only=("name",))
@click.pass_context
def show(ctx: click.Context, **kw: Any) -> None:
    """A recipe's published numbers, rows, sweeps (grid, hparams, steps), weights and launch command."""
    from dgmoe.recipes.describe import show_text

    click.echo(show_text(get_recipe(build_config(RecipeLaunchConfig, ctx, kw).name)))


def _execution(flags: tuple[str, ...], ctx: click.Context) -> dict[str, Any]:
    settings, base = train_flags(flags, ctx=ctx)
    if base is not None:
        raise UsageError("--config after `--` is not a recipe setting: the recipe declares its runs")
    wrong = [k for k in settings if k not in EXECUTION_KEYS]
    if wrong:
        raise UsageError(f"{flag(wrong[0])} after `--` would change what the recipe computes; only execution flags "
                         f"pass on ({', '.join(flag(k) for k in EXECUTION_KEYS)}). For another grid use "
                         "`dgmoe sweep launch`")
    return settings


@command.command("launch", cls=TrainFlagsAfterDash, context_settings={"show_default": True})
@config_options(RecipeLaunchConfig, click_required=False)
@config_file_options("recipe launch")
@launcher_options
@click.argument("flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- EXECUTION_FLAGS...]")
@click.pass_context
def launch(ctx: click.Context, flags: tuple[str, ...], config_file: str | None, **kw: Any) -> None:
    """Check a recipe's inputs, then launch its sweeps (resuming what is unfinished).

    Every data folder and weights file is checked first: what is missing is listed, one line each, and
    nothing is written. Execution flags of `dgmoe train` go after `--` and apply to every job, e.g.
    `-- --device cuda --num-workers 8`. The cost and synthetic tables run in this process. `--print-config`
    writes the launch (recipe, scale, inputs, rows) as JSON; `--config FILE` launches it again.
    """
    from dgmoe.recipes.run import MissingInputsError, describe_jobs, prepare
    from dgmoe.recipes.run import launch as run_plan

    cfg = build_config(RecipeLaunchConfig, ctx, kw, RecipeLaunchConfig.from_file(config_file) if config_file else None)
    if kw["print_config"]:
        print_config(cfg)
        return
    recipe = get_recipe(cfg.name)
    execution = _execution(flags, ctx)
    output_dir = cfg.folder()
    opts = launch_options(ctx, kw)
    try:
        plan = prepare(recipe, cfg.scale, output_dir, cfg.data_dir, cfg.pretrained, cfg.rows, execution,
                       cfg.n_hparams, cfg.n_trials)
    except MissingInputsError as err:
        for line in err.lines:
            click.echo(f"missing: {line}", err=True)
        raise
    except (ValueError, KeyError, json.JSONDecodeError) as err:
        raise UsageError(str(err)) from None
    if plan.jobs:
        click.echo(f"{recipe.name} at the {plan.scale} scale into {output_dir}:\n{describe_jobs(plan)}")
    try:
        reports = run_plan(plan, opts.launcher, opts, echo=click.echo, relaunch_queued=opts.relaunch_queued,
                           seed=opts.seed, device=execution.get("device", AUTO))
    except (ValueError, ImportError) as err:
        raise UsageError(str(err)) from None
    failed = sum(o.outcome == "failed" for r in reports for o in r.outcomes)
    if failed:
        raise DgmoeError(f"{failed} job(s) failed; see `dgmoe sweep status --output-dir {output_dir}/<part> "
                         "--verbose`")
    if opts.launcher != "dummy":
        click.echo(f"then: dgmoe results {output_dir} --recipe {recipe.name}")
