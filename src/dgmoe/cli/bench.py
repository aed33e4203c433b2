"""`dgmoe bench`: cost benchmarks printed as ratios measured in one run, each with its spread over rounds,
and warnings wherever a number should not be trusted (see `dgmoe.bench.timing`)."""
from __future__ import annotations

import click

from dgmoe.bench.timing import MIN_ROUNDS
from dgmoe.cli.options import ListFlagsGroup

ROUNDS = click.IntRange(min=MIN_ROUNDS)


def _print_table(result: tuple[list[dict], list[str]] | list[dict]) -> None:
    """The rows as a Markdown table, then every warning (`WARNING: ...`), or a line saying there is none."""
    import pandas as pd

    rows, warnings = result if isinstance(result, tuple) else (result, None)
    click.echo(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"))
    if warnings is None:
        return
    for line in dict.fromkeys(warnings):
        click.echo(f"WARNING: {line}")
    if not warnings:
        click.echo("No timing warning: every spread over rounds is within 10% and the problem is large enough.")


def _print_machine(threads: int | None, device: str) -> None:
    import platform

    import torch

    if device.startswith("cuda"):
        where = torch.cuda.get_device_name(device)
    else:
        where = platform.processor() or platform.machine()
    click.echo(f"torch {torch.__version__}, {threads or torch.get_num_threads()} threads, {where}")


@click.group("bench", cls=ListFlagsGroup)
def command() -> None:
    """Cost benchmarks (MoE layer vs its limit; whole models vs a reference; R26 stem vs timm)."""


@command.command("layer")
@click.option("--tokens", type=int, default=32 * 197, show_default=True)
@click.option("--dim", type=int, default=384, show_default=True)
@click.option("--experts", type=int, default=6, show_default=True)
@click.option("--top-k", type=int, default=2, show_default=True)
@click.option("--router", type=click.Choice(["cosine", "linear"]), default="cosine", show_default=True)
@click.option("--rounds", type=ROUNDS, default=7, show_default=True,
              help=f"Timed rounds (at least {MIN_ROUNDS}), after 2 untimed warm-up rounds.")
@click.option("--threads", type=int, default=None)
@click.option("--device", default="cpu", show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="bf16: every candidate runs under bf16 autocast (the router stays fp32).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Fresh processes to repeat the measurement in; ratios are their median (min, max).")
@click.option("--paths", default=None, help="Comma list of candidates to time (default: all), e.g. "
              "'moe grouped (default),router alone' (names as printed).")
def layer(repeats, paths, **kw) -> None:
    """MoE layer forward+backward vs the limit (k dense FFNs over all tokens)."""
    from dgmoe.bench.layer import CANDIDATES, LayerBenchConfig, bench_moe_layer_repeated

    chosen = CANDIDATES if paths is None else tuple(p.strip() for p in paths.split(","))
    unknown = [p for p in chosen if p not in CANDIDATES]
    if unknown:
        raise click.BadParameter(f"unknown {unknown}; valid: {', '.join(CANDIDATES)}", param_hint="--paths")
    cfg = LayerBenchConfig(**kw)
    _print_machine(cfg.threads, cfg.device)
    click.echo(f"{repeats} fresh processes per path x {cfg.rounds} rounds; "
               f"T={cfg.tokens}, d={cfg.dim}, N={cfg.experts}, k={cfg.top_k}, {cfg.router} router, {cfg.precision}")
    _print_table(bench_moe_layer_repeated(cfg, repeats, chosen))


@command.command("models")
@click.option("--models", default=None, help="Comma list; the first is the reference.")
@click.option("--img-size", type=int, default=224, show_default=True)
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--rounds", type=ROUNDS, default=5, show_default=True,
              help=f"Timed rounds (at least {MIN_ROUNDS}), after 2 untimed warm-up rounds.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--compile", "compile_", is_flag=True, help="torch.compile every model.")
@click.option("--threads", type=int, default=None)
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Fresh processes to repeat the timings in; ratios are their median.")
def models(models, img_size, batch_size, rounds, device, precision, compile_, threads, repeats) -> None:
    """Train step, inference time, peak memory, params and FLOPs of several models, as ratios."""
    from dgmoe.bench.models import DEFAULT_MODELS, ModelBenchConfig, bench_models

    names = tuple(models.split(",")) if models else DEFAULT_MODELS
    _print_machine(threads, device)
    click.echo(f"{repeats} fresh processes x {rounds} rounds; batch {batch_size} at {img_size} px, {precision}"
               f"{', torch.compile' if compile_ else ''}; reference {names[0]}")
    _print_table(bench_models(ModelBenchConfig(names, img_size, batch_size, rounds=rounds, device=device,
                                               precision=precision, compile=compile_, threads=threads), repeats))


@command.command("memory")
@click.option("--models", default="vit_small_patch16_224,gmoe_small_patch16_224", show_default=True,
              help="Comma list; the first is the reference.")
@click.option("--batch-sizes", default="16,32,96", show_default=True,
              help="Comma list. 96 is DomainBed's step (32 images x 3 training domains).")
@click.option("--img-size", type=int, default=224, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--threads", type=int, default=None)
def memory(models, batch_sizes, img_size, device, precision, threads) -> None:
    """Peak training memory (weights, gradients, Adam state, activations) per model and batch size."""
    from dgmoe.bench.models import ModelBenchConfig, bench_memory

    try:
        sizes = tuple(int(b) for b in batch_sizes.split(","))
    except ValueError:
        raise click.BadParameter(f"expected a comma list of integers, got {batch_sizes!r}", param_hint="--batch-sizes")
    _print_machine(threads, device)
    cfg = ModelBenchConfig(tuple(models.split(",")), img_size, device=device, precision=precision, threads=threads)
    _print_table(bench_memory(cfg, sizes))


@command.command("stem")
@click.option("--img-size", type=int, default=32, show_default=True)
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--rounds", type=ROUNDS, default=7, show_default=True,
              help=f"Timed rounds (at least {MIN_ROUNDS}), after 2 untimed warm-up rounds.")
@click.option("--threads", type=int, default=None)
@click.option("--reference", type=click.Choice(["auto", "timm", "previous"]), default="auto", show_default=True,
              help="auto: timm's stem when timm imports, else dgmoe's previous weight standardisation.")
def stem(**kw) -> None:
    """The hybrid R26 stem (weight-standardised convolutions) vs timm's, with the same weights."""
    from dgmoe.bench.stem import StemBenchConfig, bench_stem

    cfg = StemBenchConfig(**kw)
    _print_machine(cfg.threads, "cpu")
    click.echo(f"{cfg.rounds} rounds; batch {cfg.batch_size} at {cfg.img_size} px")
    _print_table(bench_stem(cfg))
