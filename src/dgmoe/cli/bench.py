"""`dgmoe bench`: cost benchmarks printed as ratios measured in one run, each with its spread over rounds,
and warnings wherever a number should not be trusted (see `dgmoe.bench.timing`)."""
from __future__ import annotations

import click

from dgmoe.bench.timing import MIN_ROUNDS
from dgmoe.cli.options import ListFlagsGroup, config_from_options, run_options

ROUNDS = click.IntRange(min=MIN_ROUNDS)
#: the `dgmoe train` settings that describe what `bench data` loads and steps (not where results go)
BENCH_DATA_SETTINGS = ("dataset", "test_envs", "holdout_fraction", "img_size", "n_per_domain", "model", "patch_size",
                       "model_kwargs", "pretrained", "algorithm", "hparams", "trial_seed", "hparams_seed", "seed",
                       "precision", "data_dir", "device", "num_threads")


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
    from dgmoe.bench.layer import CANDIDATES, LayerBenchConfig, available_candidates, bench_moe_layer_repeated

    chosen = available_candidates() if paths is None else tuple(p.strip() for p in paths.split(","))
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
@click.option("--compile", "compile_", is_flag=True,
              help="torch.compile every model block by block, as `dgmoe train --compile`.")
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


@command.command("data")
@click.option("--workers", default="0,2,4,8", show_default=True,
              help="Comma list of loader worker counts to measure.")
@click.option("--timed-steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Steps timed per measurement, after 3 warm-up steps.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Start from a run config (config.json); the train flags given override it.")
@run_options(only=BENCH_DATA_SETTINGS)
@click.pass_context
def data(ctx: click.Context, workers: str, timed_steps: int, config_file: str | None, **kw) -> None:
    """Does loading keep up? Loader img/s per worker count next to the model step's img/s, for the run the
    `dgmoe train` flags describe (same data, transforms, batch and device)."""
    from dgmoe.bench.data import DataBenchConfig, bench_data
    from dgmoe.engine.config import RunConfig

    try:
        counts = tuple(int(w) for w in workers.split(","))
    except ValueError:
        raise click.BadParameter(f"expected a comma list of integers, got {workers!r}", param_hint="--workers")
    base = RunConfig.from_file(config_file) if config_file else None
    run = config_from_options(ctx, kw, base)
    _print_machine(run.execution.num_threads, run.execution.device)
    click.echo(f"{run.data.dataset} with {run.model.name} ({run.algorithm.name}, {run.training.precision}) on "
               f"{run.execution.device}; {timed_steps} timed steps per measurement")
    _print_table(bench_data(run, DataBenchConfig(workers=counts, steps=timed_steps)))
