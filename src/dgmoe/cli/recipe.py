"""`dgmoe recipe`: the seed papers' tables as recipes: list them, show one, launch one as sweeps."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from dgmoe.cli.options import ListFlagsGroup
from dgmoe.cli.sweep import TrainFlagsAfterDash, launch_options, launcher_options, train_flags
from dgmoe.engine.config import ExecutionConfig
from dgmoe.errors import DgmoeError, UsageError
from dgmoe.recipes import get_recipe, list_recipes  # the paper modules load on first use
from dgmoe.recipes.plan import SCALES
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
@click.argument("name")
def show(name: str) -> None:
    """A recipe's published numbers, rows, sweeps (grid, hparams, steps), weights and launch command."""
    from dgmoe.recipes.describe import show_text

    click.echo(show_text(get_recipe(name)))


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
@click.argument("name")
@click.option("--data-dir", default=None, help="Folder holding the datasets (<data-dir>/<DatasetDir>/..., WILDS "
              "folders); not needed at the smoke scale.")
@click.option("--pretrained", multiple=True,
              help="Weights as KEY=FILE (repeat; `dgmoe recipe show NAME` lists the keys), a folder holding the "
                   "files by their listed names, or one FILE when the launch needs one kind.")
@click.option("--output-dir", default=None, help="Recipe folder, one sweep folder per part [runs/recipes/NAME, "
              "NAME-smoke at the smoke scale].")
@click.option("--scale", type=click.Choice(SCALES), default="paper",
              help="paper: the paper's grid; smoke: stand-in data, narrow models, a few CPU steps.")
@click.option("--rows", multiple=True, help="Launch only these rows (labels as `show` prints them; repeat the flag).")
@click.option("--n-hparams", type=click.IntRange(min=1), default=None, help="Replace the parts' hparams draws.")
@click.option("--n-trials", type=click.IntRange(min=1), default=None, help="Replace the parts' trial seeds.")
@launcher_options
@click.argument("flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- EXECUTION_FLAGS...]")
@click.pass_context
def launch(ctx: click.Context, name: str, flags: tuple[str, ...], **kw: Any) -> None:
    """Check a recipe's inputs, then launch its sweeps (resuming what is unfinished).

    Every data folder and weights file is checked first: what is missing is listed, one line each, and
    nothing is written. Execution flags of `dgmoe train` go after `--` and apply to every job, e.g.
    `-- --device cuda --num-workers 8`. The cost and synthetic tables run in this process.
    """
    from dgmoe.recipes.run import MissingInputsError, describe_jobs, prepare
    from dgmoe.recipes.run import launch as run_plan

    recipe = get_recipe(name)
    execution = _execution(flags, ctx)
    output_dir = kw["output_dir"] or f"runs/recipes/{recipe.name}{'-smoke' if kw['scale'] == 'smoke' else ''}"
    try:
        plan = prepare(recipe, kw["scale"], output_dir, kw["data_dir"], kw["pretrained"], kw["rows"], execution,
                       kw["n_hparams"], kw["n_trials"])
        opts = launch_options(kw)
    except MissingInputsError as err:
        for line in err.lines:
            click.echo(f"missing: {line}", err=True)
        raise
    except (ValueError, KeyError, json.JSONDecodeError) as err:
        raise UsageError(str(err)) from None
    if plan.jobs:
        click.echo(f"{recipe.name} at the {plan.scale} scale into {output_dir}:\n{describe_jobs(plan)}")
    try:
        reports = run_plan(plan, kw["launcher"], opts, echo=click.echo, relaunch_queued=kw["relaunch_queued"],
                           seed=kw["seed"], device=execution.get("device", "cpu"))
    except (ValueError, ImportError) as err:
        raise UsageError(str(err)) from None
    failed = sum(o.outcome == "failed" for r in reports for o in r.outcomes)
    if failed:
        raise DgmoeError(f"{failed} job(s) failed; see `dgmoe sweep status --output-dir {output_dir}/<part> "
                         "--verbose`")
    if kw["launcher"] != "dummy":
        click.echo(f"then: dgmoe results {output_dir} --recipe {recipe.name}")
