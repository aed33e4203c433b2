"""`dgmoe analyze`: look inside a trained run (routing maps, expert usage, attention maps, CUB-DG experts)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import click

from dgmoe.analysis.config import AttentionAnalysisConfig, CubAnalysisConfig, RoutingAnalysisConfig
from dgmoe.cli.options import ListFlagsGroup, build_config, config_options
from dgmoe.errors import UsageError


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


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


def _run_images(cfg: RoutingAnalysisConfig | AttentionAnalysisConfig) -> tuple[Path, Any]:
    """(the run folder, its model with the images the analysis draws) for an image analysis's settings."""
    from dgmoe.analysis.pipeline import load_run_images

    run_dir = Path(cfg.run_dir)
    return run_dir, load_run_images(run_dir, cfg.n_images, _path(cfg.data_dir), cfg.which, cfg.seed)


@click.group("analyze", cls=ListFlagsGroup)
def command() -> None:
    """Routing maps, expert usage, attention maps and CUB-DG attribute/expert histograms of a trained run."""


@command.command("routing")
@config_options(RoutingAnalysisConfig)
@click.pass_context
def routing(ctx: click.Context, **kw: Any) -> None:
    """Top-1 expert of every patch per MoE block, drawn over the images, and expert usage per domain."""
    from dgmoe.analysis.pipeline import analyze_routing

    cfg = build_config(RoutingAnalysisConfig, ctx, kw)
    run_dir, run = _run_images(cfg)
    _sparse(run_dir, run.model)
    with _writing(run_dir, _path(cfg.out_dir)) as out:
        click.echo(analyze_routing(run, out, cfg.show, cfg.mode))
    click.echo(f"wrote routing maps and expert usage to {out}")


@command.command("attention")
@config_options(AttentionAnalysisConfig)
@click.pass_context
def attention(ctx: click.Context, **kw: Any) -> None:
    """Per-head CLS attention maps of one block and the head-redundancy score per domain."""
    from dgmoe.analysis.pipeline import analyze_attention

    cfg = build_config(AttentionAnalysisConfig, ctx, kw)
    run_dir, run = _run_images(cfg)
    with _writing(run_dir, _path(cfg.out_dir)) as out:
        click.echo(analyze_attention(run, out, cfg.show, cfg.block))
    click.echo(f"wrote attention maps to {out}")


@command.command("cub", short_help="Part x expert and attribute x expert histograms on CUB-DG.")
@config_options(CubAnalysisConfig)
@click.pass_context
def cub(ctx: click.Context, **kw: Any) -> None:
    """Part x expert histograms (GMoE Fig. 3b) and attribute x expert matrices (SF-MoE Fig. 5) on CUB-DG."""
    from dgmoe.analysis.pipeline import analyze_cub
    from dgmoe.engine.checkpoint import load_run

    cfg = build_config(CubAnalysisConfig, ctx, kw)
    run_dir = Path(cfg.run_dir)
    model, _ = load_run(run_dir, which=cfg.which)
    _sparse(run_dir, model)
    with _writing(run_dir, _path(cfg.out_dir)) as out:
        click.echo(analyze_cub(model, Path(cfg.cub_dir), out, cfg.domain, cfg.split, cfg.n_images, cfg.show, cfg.k))
    click.echo(f"wrote CUB-DG expert analysis to {out}")
