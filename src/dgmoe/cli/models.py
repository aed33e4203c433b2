"""`dgmoe models`: the registered models with their parameter counts, input size and a description (family,
sparse layout, paper), read from meta-device builds, so listing all of them takes well under a second."""
from __future__ import annotations

from typing import Any

import click

from dgmoe.cli.configs import ModelsList
from dgmoe.cli.options import build_config, config_options


@click.command("models")
@config_options(ModelsList)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """List registered models (optionally matching a glob PATTERN such as 'gmoe*') with their parameter count
    at the default 1000 classes, input size and a description."""
    from dgmoe.models import list_models
    from dgmoe.models.catalogue import summarize_model

    cfg = build_config(ModelsList, ctx, kw)
    pattern, names_only = cfg.pattern, cfg.names_only
    names = list_models(pattern)
    if not names:
        click.echo(f"no registered model matches {pattern!r}; `dgmoe models` lists them all", err=True)
        return
    if names_only:
        click.echo("\n".join(names))
        return
    rows = [summarize_model(name) for name in names]
    width = max(len(n) for n in names)
    click.echo(f"{'model':{width}s}  {'params':>8s}  {'input':>7s}  description")
    for row in rows:
        c, h, w = row.info.input_size
        size = f"{h} px" if h == w else f"{h}x{w}"
        click.echo(f"{row.name:{width}s}  {row.num_params / 1e6:7.2f}M  {size:>7s}  {row.description}")
