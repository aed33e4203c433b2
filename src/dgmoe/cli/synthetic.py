"""`dgmoe synthetic`: the Theorem-1 experiment of GMoE App. B.2 (tables, JSON and PNG figures)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal, cast

import click

from dgmoe.engine.progress import Mode
from dgmoe.experiments.synthetic_config import SyntheticConfig


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}") from None


@click.command("synthetic")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("synthetic_out"),
              show_default=True, help="Folder for synthetic.md, synthetic.json and the PNG figures.")
@click.option("--seeds", default="0,1,2", show_default=True, help="Seeds of the noiseless experiment (Fig. 4).")
@click.option("--epochs", type=click.IntRange(min=1), default=SyntheticConfig.epochs, show_default=True)
@click.option("--n-train", type=click.IntRange(min=1), default=SyntheticConfig.n_train, show_default=True)
@click.option("--fcn-pool", type=click.Choice(["max", "mean"]), default="max", show_default=True)
@click.option("--grid", default="default", show_default=True,
              help="p1/p2 values of the noisy grid (Fig. 5): 'default' (0.7,0.85,1), 'full' (0.6..1.0 by 0.1), "
                   "'none' to skip it, or comma-separated values.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="torch CPU threads.")
@click.option("--progress", "progress_mode", type=click.Choice(["auto", "bar", "lines", "none"]), default="auto",
              show_default=True, help="auto: a bar on a terminal, otherwise a line at least every 20 s (on stderr).")
def command(out_dir: Path, seeds: str, epochs: int, n_train: int, fcn_pool: str, grid: str, threads: int,
            progress_mode: str) -> None:
    """Train the MLP and the FCN of GMoE App. B.2 and test them under both feature shifts (CPU, minutes)."""
    import torch

    from dgmoe.experiments import synthetic as syn

    torch.set_num_threads(threads)
    seed_list = tuple(int(s) for s in _floats(seeds))
    named_grids: dict[str, tuple[float, ...]] = {"default": syn.DEFAULT_GRID, "full": syn.FULL_GRID, "none": ()}
    grid_values = named_grids[grid] if grid in named_grids else _floats(grid)
    cfg = replace(SyntheticConfig(), epochs=epochs, n_train=n_train,
                  fcn_pool=cast(Literal["max", "mean"], fcn_pool))  # click.Choice checked it
    click.echo(syn.run_and_report(out_dir, cfg, seed_list, grid_values, cast(Mode, progress_mode)))
    click.echo(f"wrote {out_dir}/synthetic.md, synthetic.json, synthetic_noiseless.png"
               + (", synthetic_noisy.png" if grid_values else ""))
