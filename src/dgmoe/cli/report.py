"""`dgmoe report RUNS_DIR`: a self-contained static HTML page of every run under a folder."""
from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="HTML file to write (default: RUNS_DIR/report.html).")
@click.option("--selection", type=click.Choice(["iid", "loo", "oracle", "all"]), default="all", show_default=True,
              help="Model selection method(s) of the results tables.")
@click.option("--include", "include", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Markdown file to add as a section (repeatable), e.g. the documented cost table.")
@click.option("--title", default="dgmoe report", show_default=True)
@click.option("--no-params", is_flag=True, help="Do not rebuild each run's model to count its parameters.")
@click.option("--analyze", is_flag=True,
              help="First run `dgmoe analyze routing/attention` on every finished run without an analysis/ folder "
                   "(reads each run's dataset from its data_dir).")
@click.option("--n-images", type=click.IntRange(min=1), default=8, show_default=True,
              help="With --analyze: images per domain.")
def command(runs_dir: Path, out: Path | None, selection: str, include: tuple[Path, ...], title: str,
            no_params: bool, analyze: bool, n_images: int) -> None:
    """Results tables, cost table, accuracy per step and the `dgmoe analyze` figures of each run, in one page
    with every image embedded (readable offline). Run `dgmoe analyze routing RUN` first to add routing maps."""
    from dgmoe.report.html import build_report

    if analyze:
        from dgmoe.analysis.pipeline import analyze_runs

        for run in analyze_runs(runs_dir, n_images):
            click.echo(f"analysed {run}")
    path = build_report(runs_dir, out, selection, include, title, count_params=not no_params)
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
