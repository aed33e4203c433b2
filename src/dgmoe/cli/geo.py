"""`dgmoe geo`: the geographic benchmark, the Sentinel-2 real-coordinate check and MoGE routing analysis."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dgmoe.atomic import write_text_atomic
from dgmoe.cli.options import ListFlagsGroup, build_config, config_options
from dgmoe.document import Document, Protocol
from dgmoe.experiments.config import GeoAnalyzeConfig, GeoBenchConfig, GeoBenchmarkRunConfig, SentinelConfig


@click.group("geo", cls=ListFlagsGroup)
def command() -> None:
    """MoGE and geographic metadata: GeoMNIST benchmark, Sentinel-2 check, routing analysis."""


@command.command("benchmark")
@config_options(GeoBenchmarkRunConfig)
@config_options(GeoBenchConfig)
@click.pass_context
def benchmark(ctx: click.Context, **kw: Any) -> None:
    """Train and compare methods on GeoMNIST; prints (and saves) a Markdown table."""
    from dgmoe.experiments.geo import results_table, run_geo_benchmark

    run, settings = build_config(GeoBenchmarkRunConfig, ctx, kw), build_config(GeoBenchConfig, ctx, kw)
    output_dir, select = run.output_dir, run.select
    rows = run_geo_benchmark(output_dir, list(run.methods), list(run.seeds), settings, select, log=click.echo)
    table = Document((_protocol(output_dir, select), results_table(rows))).markdown()
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(output_dir) / f"summary_{select}.json", json.dumps(rows, indent=1))
    write_text_atomic(Path(output_dir) / f"table_{select}.md", table)
    click.echo(table, nl=False)


def _protocol(output_dir: str, select: str) -> Protocol:
    """The protocol lines of the benchmark's runs (`dgmoe.report.protocol`)."""
    import warnings

    from dgmoe.report.collect import load_records
    from dgmoe.report.protocol import protocol_block

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = load_records(output_dir)
    how = "best validation worst-region accuracy" if select == "val_worst" else "last checkpoint"
    return protocol_block(records, how)


@command.command("sentinel")
@config_options(SentinelConfig)
@click.pass_context
def sentinel(ctx: click.Context, **kw: Any) -> None:
    """Real coordinates end to end: train ERM, ERM+LE and MoGE on the Sentinel-2 sample, map MoGE's routing."""
    from dgmoe.experiments.geo import run_sentinel_check

    cfg = build_config(SentinelConfig, ctx, kw)
    rows = run_sentinel_check(cfg.data_dir, cfg.output_dir, cfg.steps, cfg.seed, log=click.echo)
    write_text_atomic(Path(cfg.output_dir) / "summary.json", json.dumps(rows, indent=1))


@command.command("analyze")
@config_options(GeoAnalyzeConfig)
@click.pass_context
def analyze(ctx: click.Context, **kw: Any) -> None:
    """Routing frequency, forced-expert accuracy matrix and routing map (PNG) of a MoGE run."""
    import dgmoe.algorithms.moge  # noqa: F401
    import dgmoe.data.geo.geomnist  # noqa: F401
    import dgmoe.data.geo.sentinel  # noqa: F401
    import dgmoe.models.moge  # noqa: F401
    from dgmoe.analysis.geo import analyze_run

    cfg = build_config(GeoAnalyzeConfig, ctx, kw)
    chosen = list(cfg.envs) if cfg.envs is not None else None
    paths = analyze_run(cfg.run_dir, cfg.output_dir or Path(cfg.run_dir) / "figures", cfg.which, cfg.data_dir, chosen)
    for name, path in paths.items():
        click.echo(f"{name}: {path}")


@command.command("encoders")
def encoders() -> None:
    """List the registered location encoders."""
    from dgmoe.models.location.encoders import list_location_encoders

    for name in list_location_encoders():
        click.echo(name)
