"""`dgmoe models`: the registered models with their parameter counts, input size and a description (family,
sparse layout, paper), read from meta-device builds, so listing all of them takes well under a second."""
from __future__ import annotations

from typing import Any

import click

from dgmoe.cli.config import ModelsListConfig
from dgmoe.cli.options import build_config, config_options
from dgmoe.peft.config import PEFT_MODES


@click.command("models")
@config_options(ModelsListConfig)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """List registered models (optionally matching a glob PATTERN such as 'gmoe*') with their parameter count
    at the default 1000 classes, input size and a description; with --peft, their trainable and total counts
    under each parameter-efficient mode."""
    from dgmoe.models import list_models
    from dgmoe.models.summary import summarize_model

    cfg = build_config(ModelsListConfig, ctx, kw)
    pattern, names_only, peft = cfg.pattern, cfg.names_only, cfg.peft
    names = list_models(pattern)
    if not names:
        click.echo(f"no registered model matches {pattern!r}; `dgmoe models` lists them all", err=True)
        return
    if names_only:
        click.echo("\n".join(names))
        return
    width = max(len(n) for n in names)
    if peft is not None:
        show_peft(names, width, list(PEFT_MODES[1:]) if peft == "all" else [peft])
        return
    rows = [summarize_model(name) for name in names]
    click.echo(f"{'model':{width}s}  {'params':>8s}  {'input':>7s}  description")
    for row in rows:
        c, h, w = row.info.input_size
        size = f"{h} px" if h == w else f"{h}x{w}"
        click.echo(f"{row.name:{width}s}  {row.num_params / 1e6:7.2f}M  {size:>7s}  {row.description}")


def show_peft(names: list[str], width: int, modes: list[str]) -> None:
    """One row per model: its full parameter count, then trainable/total (millions) under each mode."""
    from dgmoe.models.summary import peft_counts, summarize_model

    def cell(counts: tuple[int, int] | None) -> str:
        return "-" if counts is None else f"{counts[1] / 1e6:.3f}M/{counts[0] / 1e6:.2f}M"

    cols = [max(len(m), 16) for m in modes]
    click.echo("params: the full model's parameters; under each --peft mode: trainable/total parameters, in "
               "millions (the total grows by the modules the mode adds; -: the mode does not apply)")
    click.echo(f"{'model':{width}s}  {'params':>8s}  " + "  ".join(f"{m:>{c}s}" for m, c in zip(modes, cols)))
    for name in names:
        cells = [cell(peft_counts(name, m)) for m in modes]
        click.echo(f"{name:{width}s}  {summarize_model(name).num_params / 1e6:7.2f}M  "
                   + "  ".join(f"{t:>{c}s}" for t, c in zip(cells, cols)))
