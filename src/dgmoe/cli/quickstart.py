"""`dgmoe quickstart`: the offline main job (ViT vs GMoE on bundled RotatedMNIST, one domain left out)."""
from __future__ import annotations

import click

from dgmoe.cli.options import INDEX_LIST, LIST_HINT
from dgmoe.errors import UsageError


@click.command("quickstart")
@click.option("--output-dir", default="runs/quickstart", show_default=True)
@click.option("--dataset", type=click.Choice(["RotatedMNIST", "ColoredMNIST"]), default="RotatedMNIST",
              show_default=True)
@click.option("--test-envs", "--test_envs", "test_envs", multiple=True, type=INDEX_LIST, default=(0,),
              show_default=True, help=f"The domain(s) left out, as `dgmoe train --test-envs` ({LIST_HINT}).")
@click.option("--test-env", "old_test_env", type=int, default=None, hidden=True, help="Old spelling of --test-envs.")
@click.option("--steps", type=int, default=300, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_context
def command(ctx: click.Context, output_dir: str, dataset: str, test_envs: tuple[int, ...], old_test_env: int | None,
            steps: int, seed: int) -> None:
    """Train a small ViT and a small GMoE offline and print their in- and out-of-domain accuracy."""
    if old_test_env is not None:
        if ctx.get_parameter_source("test_envs") != click.core.ParameterSource.DEFAULT:
            raise UsageError("--test-env is the old spelling of --test-envs; give one of them")
        test_envs = (old_test_env,)
    import pandas as pd

    from dgmoe.engine.trainer import main_log_config
    from dgmoe.experiments.quickstart import quickstart

    main_log_config()
    rows = quickstart(output_dir, dataset, test_envs, steps, seed=seed)
    table = pd.DataFrame(rows)
    for col in ("in-domain acc", "out-of-domain acc"):
        table[col] = (100 * table[col]).map("{:.1f}".format)
    table["train time (s)"] = table["train time (s)"].map("{:.0f}".format)
    domains = f"test domain{'s' if len(test_envs) > 1 else ''} {rows[0]['test domain']}"
    click.echo(f"\n{dataset}, {domains} (selection: training-domain validation)\n")
    click.echo(table.to_markdown(index=False))
    click.echo(f"\nRun folders: {output_dir}/<model>; tables over many runs: dgmoe results {output_dir}")
