"""`dgmoe soup RUNS_DIR`: weight averages (uniform, greedy, ratatouille) and output ensembles of a sweep's runs."""
from __future__ import annotations

from pathlib import Path

import click

METHODS = ("uniform", "greedy", "ratatouille", "ensemble")  # (dgmoe.sweep.soup.METHODS, without importing torch)


@click.command("soup")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--method", "methods", type=click.Choice(METHODS), multiple=True,
              help="Soups to make (repeat the flag; default: all four). uniform/greedy/ensemble average the hparams "
              "draws of one (dataset, held-out domains, trial seed, algorithm, model); ratatouille the runs of any "
              "algorithm that share an initialisation.")
@click.option("--weights", "which", type=click.Choice(["best", "last"]), default="best", show_default=True,
              help="Each run's weights: best (training-domain validation within the run) or last.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the soups' run folders go (default: RUNS_DIR/soups, so `dgmoe results RUNS_DIR` "
              "lists them as rows of their own).")
@click.option("--device", default="cpu", show_default=True, help="torch device of the evaluations.")
@click.option("--data-dir", default=None, help="Dataset root (default: each run's own --data-dir).")
@click.option("--eval-batch-size", type=click.IntRange(min=1), default=64, show_default=True)
def command(runs_dir: Path, methods: tuple[str, ...], which: str, out_dir: Path | None, device: str,
            data_dir: str | None, eval_batch_size: int) -> None:
    """Average the weights of the finished runs under RUNS_DIR (DiWA, model soups, model ratatouille) and
    evaluate the averages and the output ensembles as runs: each is a run folder with DomainBed records.

    Runs are averaged only when they share an architecture and an initialisation (the same --pretrained file,
    or the same --seed when trained from scratch); otherwise the command stops in one line, before writing.
    """
    from dgmoe.sweep.soup import SoupOptions, make_soups

    options = SoupOptions(methods=methods or METHODS, which=which, device=device, data_dir=data_dir,
                          eval_batch_size=eval_batch_size)
    folders = make_soups(runs_dir, out_dir, options, echo=lambda s: click.echo(s, err=True))
    click.echo(f"{len(folders)} soup run folder(s) under {out_dir or runs_dir / 'soups'}; `dgmoe results "
               f"{runs_dir}` lists them")
