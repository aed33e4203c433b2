"""`dgmoe bench`: cost benchmarks printed as ratios measured in one run, each with its spread over rounds,
and warnings wherever a number should not be trusted (see `dgmoe.bench.timing`)."""
from __future__ import annotations

from typing import Any

import click

from dgmoe.bench.config import (
    DataBenchConfig,
    LayerBenchConfig,
    MemoryBenchConfig,
    ModelBenchConfig,
    StemBenchConfig,
    SyncBenchConfig,
)
from dgmoe.cli.options import ListFlagsGroup, build_config, config_from_options, config_options, run_options

#: the `dgmoe train` settings that describe what `bench data` loads and steps (not where results go)
BENCH_DATA_SETTINGS = ("dataset", "test_envs", "holdout_fraction", "img_size", "n_per_domain", "model", "patch_size",
                       "model_kwargs", "pretrained", "algorithm", "hparams", "trial_seed", "hparams_seed", "seed",
                       "precision", "fused_optimizer", "data_dir", "device", "num_threads", "compile",
                       "compile_mode")


def _print_table(result: tuple[list[dict], list[str]] | list[dict]) -> None:
    """The rows as a Markdown table (floats to 3 decimals), then every warning (`WARNING: ...`), or a line saying
    there is none."""
    from dgmoe.document import Table

    rows, warnings = result if isinstance(result, tuple) else (result, None)
    click.echo(Table.from_records("bench", rows, decimals=3).markdown(title=False))
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
@config_options(LayerBenchConfig)
@click.pass_context
def layer(ctx: click.Context, **kw: Any) -> None:
    """MoE layer forward+backward vs the limit (k dense FFNs over all tokens)."""
    from dgmoe.bench.layer import CANDIDATES, available_candidates, bench_moe_layer_repeated

    cfg = build_config(LayerBenchConfig, ctx, kw)
    chosen = available_candidates(cfg.device) if cfg.paths is None else cfg.paths
    unknown = [p for p in chosen if p not in CANDIDATES]
    if unknown:
        raise click.BadParameter(f"unknown {unknown}; valid: {', '.join(CANDIDATES)}", param_hint="--paths")
    _print_machine(cfg.threads, cfg.device)
    click.echo(f"{cfg.repeats} fresh processes per path x {cfg.rounds} rounds; "
               f"T={cfg.tokens}, d={cfg.dim}, N={cfg.experts}, k={cfg.top_k}, {cfg.router} router, {cfg.precision}")
    if any(p.startswith("moa") for p in chosen):
        click.echo(f"moa rows: MoA's layer (--peft moa) on a {cfg.dim} -> {3 * cfg.dim} qkv over the same T tokens: "
                   "4 experts of ranks 1,2,4,8, top-1, cosine router; compare them with each other")
    _print_table(bench_moe_layer_repeated(cfg, cfg.repeats, chosen))


@command.command("models")
@config_options(ModelBenchConfig)
@click.pass_context
def models(ctx: click.Context, **kw: Any) -> None:
    """Train step, inference time, peak memory, params and FLOPs of several models, as ratios."""
    from dgmoe.bench.models import bench_models

    cfg = build_config(ModelBenchConfig, ctx, kw)
    _print_machine(cfg.threads, cfg.device)
    click.echo(f"{cfg.repeats} fresh processes x {cfg.rounds} rounds; batch {cfg.batch_size} at {cfg.img_size} px, "
               f"{cfg.precision}{f', torch.compile ({cfg.compile_mode})' if cfg.compile else ''}"
               f"{', fused Adam' if cfg.fused_optimizer else ''}; reference {cfg.models[0]}")
    _print_table(bench_models(cfg, cfg.repeats))


@command.command("memory")
@config_options(MemoryBenchConfig)
@click.pass_context
def memory(ctx: click.Context, **kw: Any) -> None:
    """Peak training memory (weights, gradients, Adam state, activations) per model and batch size."""
    from dgmoe.bench.models import bench_memory

    cfg = build_config(MemoryBenchConfig, ctx, kw)
    _print_machine(cfg.threads, cfg.device)
    _print_table(bench_memory(cfg.models_config(), cfg.batch_sizes))


@command.command("syncs")
@config_options(SyncBenchConfig)
@click.pass_context
def syncs(ctx: click.Context, **kw: Any) -> None:
    """Host synchronisations per training step of whole models (CUDA's sync debug mode), per precision."""
    from dgmoe.bench.syncs import bench_syncs

    cfg = build_config(SyncBenchConfig, ctx, kw)
    _print_machine(None, cfg.device)
    click.echo(f"batch {cfg.batch_size} at {cfg.img_size} px, {cfg.steps} steps counted after a first"
               f"{', torch.compile' if cfg.compile else ''}")
    _print_table(bench_syncs(cfg))


@command.command("stem")
@config_options(StemBenchConfig)
@click.pass_context
def stem(ctx: click.Context, **kw: Any) -> None:
    """The hybrid R26 stem (weight-standardised convolutions) vs timm's, with the same weights."""
    from dgmoe.bench.stem import bench_stem

    cfg = build_config(StemBenchConfig, ctx, kw)
    _print_machine(cfg.threads, "cpu")
    click.echo(f"{cfg.rounds} rounds; batch {cfg.batch_size} at {cfg.img_size} px")
    _print_table(bench_stem(cfg))


@command.command("data")
@config_options(DataBenchConfig)
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Start from a run config (config.json); the train flags given override it.")
@run_options(only=BENCH_DATA_SETTINGS)
@click.pass_context
def data(ctx: click.Context, config_file: str | None, **kw: Any) -> None:
    """Does loading keep up? Loader img/s per worker count next to the model step's img/s, for the run the
    `dgmoe train` flags describe (same data, transforms, batch and device)."""
    from dgmoe.bench.data import bench_data
    from dgmoe.engine.config import RunConfig

    cfg = build_config(DataBenchConfig, ctx, kw)
    base = RunConfig.from_file(config_file) if config_file else None
    run = config_from_options(ctx, kw, base)
    from dgmoe.devices import resolve_device

    run = run.replace(device=resolve_device(run.execution.device))  # (its precision is checked by prepare_run)
    _print_machine(run.execution.num_threads, run.execution.device)
    click.echo(f"{run.data.dataset} with {run.model.name} ({run.algorithm.name}, {run.training.precision}) on "
               f"{run.execution.device}; {cfg.steps} timed steps per measurement")
    _print_table(bench_data(run, cfg))
