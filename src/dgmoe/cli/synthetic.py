"""`dgmoe synthetic`: the Theorem-1 experiment of GMoE App. B.2 (tables, JSON and PNG figures). Its options
are generated from `SyntheticConfig` (the experiment) and `SyntheticRunConfig` (where and how it runs)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import click

from dgmoe.cli.options import build_config, config_options
from dgmoe.engine.progress import Mode
from dgmoe.experiments.config import SET_BY_THE_EXPERIMENT, SyntheticConfig, SyntheticRunConfig
from dgmoe.settings import comma_floats


@click.command("synthetic")
@config_options(SyntheticRunConfig)
@config_options(SyntheticConfig, skip=SET_BY_THE_EXPERIMENT)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """Train the MLP and the FCN of GMoE App. B.2 and test them under both feature shifts (CPU, minutes)."""
    run = build_config(SyntheticRunConfig, ctx, kw)
    cfg = build_config(SyntheticConfig, ctx, kw)
    import torch

    from dgmoe.experiments import synthetic as syn

    named_grids: dict[str, tuple[float, ...]] = {"default": syn.DEFAULT_GRID, "full": syn.FULL_GRID, "none": ()}
    try:
        grid_values = named_grids[run.grid] if run.grid in named_grids else comma_floats(run.grid)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--grid") from None
    torch.set_num_threads(run.threads)
    out_dir = Path(run.out_dir)
    click.echo(syn.run_and_report(out_dir, cfg, run.seeds, grid_values, cast(Mode, run.progress)))
    click.echo(f"wrote {out_dir}/synthetic.md, synthetic.json, synthetic_noiseless.png"
               + (", synthetic_noisy.png" if grid_values else ""))
