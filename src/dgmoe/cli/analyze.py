"""`dgmoe analyze`: look inside a trained run (routing maps, expert usage, attention maps, CUB-DG experts)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import click

from dgmoe.cli.options import ListFlagsGroup
from dgmoe.errors import UsageError

RUN_DIR = click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
OUT = click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                   help="Output folder (default: RUN_DIR/analysis, which `dgmoe report` embeds).")
WHICH = click.option("--which", type=click.Choice(["best", "last"]), default="best", show_default=True,
                     help="Weights to load: best.safetensors or model.safetensors.")
DATA_DIR = click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                        help="Dataset root (default: the run's data_dir).")
N_IMAGES = click.option("--n-images", type=click.IntRange(min=1), default=16, show_default=True,
                        help="Images per domain (a seeded sample).")
SEED = click.option("--seed", type=int, default=0, show_default=True, help="Seed of the image sample.")


@contextmanager
def _writing(run_dir: Path, out_dir: Path | None) -> Iterator[Path]:
    """The output folder, made for the analysis; a run the analysis does not apply to (a `ValueError` of the
    analysis: no MoE layer, not a ViT) is a one-line usage error that leaves no folder behind (an empty
    analysis/ would make `dgmoe report --analyze` skip the run)."""
    out = out_dir or run_dir / "analysis"
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield out
    except ValueError as err:
        if made and not any(out.iterdir()):
            out.rmdir()
        raise UsageError(f"{run_dir}: {err}") from None


def _sparse(run_dir: Path, model: object) -> None:
    from dgmoe.analysis.routing import num_experts_of

    if not num_experts_of(model):  # type: ignore[arg-type]
        raise UsageError(f"{run_dir} holds a dense {type(model).__name__} (no MoE layer): routing maps need a "
                         f"sparse model (gmoe_*, sfmoe_*, moge_*); `dgmoe analyze attention {run_dir}` takes any ViT")


@click.group("analyze", cls=ListFlagsGroup)
def command() -> None:
    """Routing maps, expert usage, attention maps and CUB-DG attribute/expert histograms of a trained run."""


@command.command("routing")
@RUN_DIR
@OUT
@WHICH
@DATA_DIR
@N_IMAGES
@SEED
@click.option("--show", type=click.IntRange(min=1), default=4, show_default=True, help="Maps drawn per domain.")
@click.option("--mode", type=click.Choice(["numbers", "colors"]), default="numbers", show_default=True,
              help="Expert ids as numbers (GMoE Fig. 3c) or coloured cells (Figs. 10-13).")
def routing(run_dir: Path, out_dir: Path | None, which: str, data_dir: Path | None, n_images: int, seed: int,
            show: int, mode: str) -> None:
    """Top-1 expert of every patch per MoE block, drawn over the images, and expert usage per domain."""
    from dgmoe.analysis.pipeline import analyze_routing, load_run_images

    run = load_run_images(run_dir, n_images, data_dir, which, seed)
    _sparse(run_dir, run.model)
    with _writing(run_dir, out_dir) as out:
        click.echo(analyze_routing(run, out, show, mode))
    click.echo(f"wrote routing maps and expert usage to {out}")


@command.command("attention")
@RUN_DIR
@OUT
@WHICH
@DATA_DIR
@N_IMAGES
@SEED
@click.option("--show", type=click.IntRange(min=1), default=2, show_default=True, help="Images drawn per domain.")
@click.option("--block", type=int, default=-1, show_default=True, help="Transformer block (-1: the last).")
def attention(run_dir: Path, out_dir: Path | None, which: str, data_dir: Path | None, n_images: int, seed: int,
              show: int, block: int) -> None:
    """Per-head CLS attention maps of one block and the head-redundancy score per domain."""
    from dgmoe.analysis.pipeline import analyze_attention, load_run_images

    run = load_run_images(run_dir, n_images, data_dir, which, seed)
    with _writing(run_dir, out_dir) as out:
        click.echo(analyze_attention(run, out, show, block))
    click.echo(f"wrote attention maps to {out}")


@command.command("cub", short_help="Part x expert and attribute x expert histograms on CUB-DG.")
@RUN_DIR
@OUT
@WHICH
@click.option("--cub-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="Folder holding CUB_DG/ (see dgmoe.data.cub for the layout).")
@click.option("--domain", default="Natural", show_default=True, help="CUB-DG domain whose images are routed.")
@click.option("--split", type=click.Choice(["train", "test", "all"]), default="train", show_default=True)
@click.option("--n-images", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--show", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--k", "k", type=click.IntRange(min=1), default=9, show_default=True, help="Nearest patches per part.")
def cub(run_dir: Path, out_dir: Path | None, which: str, cub_dir: Path, domain: str, split: str, n_images: int,
        show: int, k: int) -> None:
    """Part x expert histograms (GMoE Fig. 3b) and attribute x expert matrices (SF-MoE Fig. 5) on CUB-DG."""
    from dgmoe.analysis.pipeline import analyze_cub
    from dgmoe.engine.checkpoint import load_run

    model, _ = load_run(run_dir, which=which)
    _sparse(run_dir, model)
    with _writing(run_dir, out_dir) as out:
        click.echo(analyze_cub(model, cub_dir, out, domain, split, n_images, show, k))
    click.echo(f"wrote CUB-DG expert analysis to {out}")
