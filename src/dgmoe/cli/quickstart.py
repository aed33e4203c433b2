"""`dgmoe quickstart`: the offline main job (ViT vs GMoE on bundled RotatedMNIST, one domain left out)."""
from __future__ import annotations

import click


@click.command("quickstart")
@click.option("--output-dir", default="runs/quickstart", show_default=True)
@click.option("--dataset", type=click.Choice(["RotatedMNIST", "ColoredMNIST"]), default="RotatedMNIST",
              show_default=True)
@click.option("--test-env", type=int, default=0, show_default=True, help="The domain left out.")
@click.option("--steps", type=int, default=300, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def command(output_dir: str, dataset: str, test_env: int, steps: int, seed: int) -> None:
    """Train a small ViT and a small GMoE offline and print their in- and out-of-domain accuracy."""
    import pandas as pd

    from dgmoe.engine.trainer import main_log_config
    from dgmoe.experiments.quickstart import quickstart

    main_log_config()
    rows = quickstart(output_dir, dataset, test_env, steps, seed=seed)
    table = pd.DataFrame(rows)
    for col in ("in-domain acc", "out-of-domain acc"):
        table[col] = (100 * table[col]).map("{:.1f}".format)
    table["train time (s)"] = table["train time (s)"].map("{:.0f}".format)
    click.echo(f"\n{dataset}, test domain {rows[0]['test domain']} (selection: training-domain validation)\n")
    click.echo(table.to_markdown(index=False))
    click.echo(f"\nRun folders: {output_dir}/<model>; tables over many runs: dgmoe results {output_dir}")
