"""`dgmoe quickstart`: the offline main job (ViT vs GMoE on bundled RotatedMNIST, one domain left out)."""
from __future__ import annotations

from typing import Any

import click

from dgmoe.cli.options import build_config, config_options
from dgmoe.errors import UsageError
from dgmoe.experiments.config import QuickstartConfig


@click.command("quickstart")
@config_options(QuickstartConfig)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """Train a small ViT and a small GMoE offline and print their in- and out-of-domain accuracy."""
    cfg = build_config(QuickstartConfig, ctx, kw)
    output_dir, dataset, test_envs, steps, seed = cfg.output_dir, cfg.dataset, cfg.test_envs, cfg.steps, cfg.seed
    if cfg.test_env is not None:
        if ctx.get_parameter_source("test_envs") != click.core.ParameterSource.DEFAULT:
            raise UsageError("--test-env is the old spelling of --test-envs; give one of them")
        test_envs = (cfg.test_env,)
    from dgmoe.document import Cell, Table
    from dgmoe.engine.trainer import main_log_config
    from dgmoe.experiments.quickstart import quickstart

    main_log_config()
    rows = quickstart(output_dir, dataset, test_envs, steps, seed=seed, eval_sample=cfg.eval_sample)
    percent = ("in-domain acc", "out-of-domain acc")
    table = Table.from_records("quickstart", [
        {**r, **{k: Cell(mean=100 * r[k]) for k in percent}, "train time (s)": Cell(mean=r["train time (s)"],
                                                                                     decimals=0)} for r in rows])
    domains = f"test domain{'s' if len(test_envs) > 1 else ''} {rows[0]['test domain']}"
    click.echo(f"\n{dataset}, {domains} (selection: training-domain validation)\n")
    click.echo(table.markdown(title=False))
    click.echo(f"\nRun folders: {output_dir}/<model>; tables over many runs: dgmoe results {output_dir}")
