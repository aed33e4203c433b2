"""`dgmoe models`: list registered models with their parameter counts."""
from __future__ import annotations

import click


@click.command("models")
@click.argument("pattern", required=False)
@click.option("--params/--no-params", default=False, help="Build each model to print its parameter count.")
def command(pattern: str | None, params: bool) -> None:
    """List registered model names (optionally matching a glob PATTERN such as 'gmoe*')."""
    from dgmoe.models import count_parameters, create_model, list_models

    for name in list_models(pattern):
        if params:
            model = create_model(name)
            layout = "".join(getattr(model, "layout", ())) or "-"
            click.echo(f"{name:40s} {count_parameters(model) / 1e6:8.2f}M  layout {layout}")
        else:
            click.echo(name)
