"""`dgmoe soup RUNS_DIR`: weight averages (uniform, greedy, ratatouille) and output ensembles of a sweep's runs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dgmoe.cli.options import build_config, config_options
from dgmoe.posthoc.config import SoupConfig, SoupRunConfig


@click.command("soup")
@config_options(SoupRunConfig)
@config_options(SoupConfig)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """Average the weights of the finished runs under RUNS_DIR (DiWA, model soups, model ratatouille) and
    evaluate the averages and the output ensembles as runs: each is a run folder with DomainBed records.

    Runs are averaged only when they share an architecture and an initialisation (the same --pretrained file,
    or the same --seed when trained from scratch); otherwise the command stops in one line, before writing.
    """
    run, options = build_config(SoupRunConfig, ctx, kw), build_config(SoupConfig, ctx, kw)  # before torch starts
    from dgmoe.posthoc.soup import make_soups

    runs_dir, out_dir = Path(run.runs_dir), Path(run.out_dir) if run.out_dir else None
    folders = make_soups(runs_dir, out_dir, options, echo=lambda s: click.echo(s, err=True))
    click.echo(f"{len(folders)} soup run folder(s) under {out_dir or runs_dir / 'soups'}; `dgmoe results "
               f"{runs_dir}` lists them")
