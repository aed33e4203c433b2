"""`dgmoe quickstart`: the offline main job (ViT vs GMoE on bundled RotatedMNIST, one domain left out), once or
over several seeds (`--seeds`: each accuracy as mean ± sd, and GMoE's out-of-domain lead seed by seed)."""
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
    if cfg.seeds and ctx.get_parameter_source("seed") != click.core.ParameterSource.DEFAULT:
        raise UsageError("--seed and --seeds: give one of them (--seeds trains both models once per seed)")
    if len(set(cfg.seeds)) != len(cfg.seeds):
        raise UsageError(f"--seeds {','.join(map(str, cfg.seeds))} repeats a seed; give each seed once")
    from dgmoe.document import Cell, Table
    from dgmoe.engine.trainer import main_log_config
    from dgmoe.experiments.quickstart import quickstart, quickstart_seeds, spread

    main_log_config()
    if cfg.seeds:
        rows = quickstart_seeds(output_dir, cfg.seeds, dataset=dataset, test_envs=test_envs, steps=steps,
                                eval_sample=cfg.eval_sample)
    else:
        rows = quickstart(output_dir, dataset, test_envs, steps, seed=seed, eval_sample=cfg.eval_sample)
    percent = ("in-domain acc", "out-of-domain acc")
    table = Table.from_records("quickstart", [
        {**r, **{k: Cell(mean=100 * r[k]) for k in percent}, "train time (s)": Cell(mean=r["train time (s)"],
                                                                                     decimals=0)} for r in rows])
    domains = f"test domain{'s' if len(test_envs) > 1 else ''} {rows[0]['test domain']}"
    click.echo(f"\n{dataset}, {domains} (selection: training-domain validation)\n")
    click.echo(table.markdown(title=False))
    if cfg.seeds:
        click.echo(_spread_text(spread(rows)))
    where = f"{output_dir}/seed<S>/<model>" if cfg.seeds else f"{output_dir}/<model>"
    click.echo(f"\nRun folders: {where}; tables over many runs: dgmoe results {output_dir}")


def _spread_text(summary: list[dict]) -> str:
    """The mean ± sd table over the seeds, and each model's out-of-domain lead over the first, seed by seed."""
    from dgmoe.document import Cell, Table

    seeds = ", ".join(map(str, summary[0]["seeds"]))
    table = Table.from_records("spread", [
        {"model": r["model"], **{f"{k} (mean ± sd)": Cell(mean=100 * r[k], sd=100 * r[f"{k} sd"])
                                 for k in ("in-domain acc", "out-of-domain acc")}} for r in summary])
    lines = [f"\nOver seeds {seeds} (sd: sample standard deviation)\n", table.markdown(title=False)]
    for r in summary[1:]:
        each = ", ".join(f"{100 * v:+.1f}" for v in r["ood leads"])
        lines.append(f"\n{r['model']} - {summary[0]['model']}, out of domain: "
                     f"{100 * r['ood lead']:+.1f} ± {100 * r['ood lead sd']:.1f} points (seed by seed: {each})")
    return "\n".join(lines)
