"""`dgmoe synthetic`: the Theorem-1 experiment of GMoE App. B.2 (tables, JSON and PNG figures)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Literal, cast

import click

from dgmoe.experiments import synthetic as syn


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}") from None


@click.command("synthetic")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("synthetic_out"),
              show_default=True, help="Folder for synthetic.md, synthetic.json and the PNG figures.")
@click.option("--seeds", default="0,1,2", show_default=True, help="Seeds of the noiseless experiment (Fig. 4).")
@click.option("--epochs", type=click.IntRange(min=1), default=syn.SyntheticConfig.epochs, show_default=True)
@click.option("--n-train", type=click.IntRange(min=1), default=syn.SyntheticConfig.n_train, show_default=True)
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

    from dgmoe.analysis.plots import plot_synthetic_noiseless, plot_synthetic_noisy, save_png
    from dgmoe.engine.progress import Progress

    torch.set_num_threads(threads)
    seed_list = tuple(int(s) for s in _floats(seeds))
    named_grids: dict[str, tuple[float, ...]] = {"default": syn.DEFAULT_GRID, "full": syn.FULL_GRID, "none": ()}
    grid_values = named_grids[grid] if grid in named_grids else _floats(grid)
    cfg = replace(syn.SyntheticConfig(), epochs=epochs, n_train=n_train,
                  fcn_pool=cast(Literal["max", "mean"], fcn_pool))  # click.Choice checked it
    out_dir.mkdir(parents=True, exist_ok=True)

    networks = 2 * len(seed_list) + len(grid_values) ** 2
    with Progress(networks * syn.steps_per_network(cfg), mode=progress_mode, unit="step") as progress:  # type: ignore[arg-type]
        progress.write(f"synthetic: {networks} networks x {syn.steps_per_network(cfg)} steps "
                       f"({epochs} epochs of {n_train} samples)")
        clean = syn.run_noiseless(cfg, seed_list, progress=progress)
        noisy = syn.run_noisy(cfg, grid_values, seed=seed_list[0], progress=progress) if grid_values else []
    text = ["## Noiseless (App. B.2.1, Fig. 4): accuracy %, mean ± std over seeds " + ",".join(map(str, seed_list)),
            "", syn.noiseless_table(clean), "", "Per seed:", "", syn.per_seed_table(clean), ""]
    save_png(plot_synthetic_noiseless(clean), out_dir / "synthetic_noiseless.png")
    payload = {"noiseless": syn.results_to_json(clean, cfg)}
    if grid_values:
        text += [f"## Noisy (App. B.2.2, Fig. 5): MLP test 1 / test 2 accuracy % after epoch 1 (seed {seed_list[0]})",
                 "", syn.noisy_table(noisy, epoch=1), "",
                 f"## Noisy: MLP test 1 / test 2 accuracy % after epoch {epochs}", "", syn.noisy_table(noisy), ""]
        save_png(plot_synthetic_noisy(noisy), out_dir / "synthetic_noisy.png")
        payload["noisy"] = syn.results_to_json(noisy, cfg)
    report = "\n".join(text)
    (out_dir / "synthetic.md").write_text(report)
    (out_dir / "synthetic.json").write_text(json.dumps(payload, indent=1))
    click.echo(report)
    click.echo(f"wrote {out_dir}/synthetic.md, synthetic.json, synthetic_noiseless.png"
               + (", synthetic_noisy.png" if grid_values else ""))
