"""`dgmoe report RUNS_DIR`: a static HTML report (overview page, one page per run, figures) of a runs folder."""
from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Report folder (index.html, runs/, figures/; default: RUNS_DIR/report/), or an .html file "
                   "(its runs/ and figures/ go to NAME_files/ beside it).")
@click.option("--selection", type=click.Choice(["iid", "loo", "oracle", "worst", "all"]), default="all",
              show_default=True,
              help="Model selection method(s) of the results tables.")
@click.option("--include", "include", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Markdown file to add as a section (repeatable), e.g. the documented cost table.")
@click.option("--title", default="dgmoe report", show_default=True)
@click.option("--no-params", is_flag=True, help="Do not rebuild each run's model to count its parameters.")
@click.option("--analyze", is_flag=True,
              help="First run the analysis (routing maps and expert usage for MoE runs, geo routing for MoGE runs, "
                   "attention maps) on every run without an analysis/ folder; says which runs it could not "
                   "analyse and why (reads each run's dataset from its data_dir).")
@click.option("--n-images", type=click.IntRange(min=1), default=8, show_default=True,
              help="With --analyze: images per domain.")
def command(runs_dir: Path, out: Path | None, selection: str, include: tuple[Path, ...], title: str,
            no_params: bool, analyze: bool, n_images: int) -> None:
    """Results tables, run index, cost table, and per run its accuracy per step and the `dgmoe analyze` figures:
    an index page that links one page per run (readable offline, nothing fetched). Run `dgmoe analyze routing
    RUN` first, or pass --analyze, to add routing maps."""
    from dgmoe.report.collect import find_results_files
    from dgmoe.report.html import build_report, report_budget, report_size

    unreadable: list[str] = []
    find_results_files(runs_dir, unreadable)
    for folder in unreadable:
        click.echo(f"warning: cannot read {folder}: its runs are left out of the report", err=True)

    notes: dict[str | Path, str] = {}
    if analyze:
        from dgmoe.analysis.pipeline import analyze_runs

        def log(outcome) -> None:
            if outcome.status == "analysed":
                click.echo(f"analysed {outcome.run}")
            elif outcome.status == "failed":
                click.echo(f"could not analyse {outcome.run}: {outcome.reason}", err=True)
                notes[outcome.run] = f"Could not be analysed: {outcome.reason}"

        outcomes = analyze_runs(runs_dir, n_images, log=log)
        counts = {s: sum(o.status == s for o in outcomes) for s in ("analysed", "skipped", "failed")}
        click.echo(f"analysis: {counts['analysed']} analysed, {counts['skipped']} already analysed, "
                   f"{counts['failed']} could not be analysed")
    path = build_report(runs_dir, out, selection, include, title, count_params=not no_params, notes=notes)
    n_runs = sum(1 for _ in runs_dir.rglob("results.jsonl"))
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB; {report_size(path) / 1e6:.2f} MB with its run pages "
               f"and figures, budget {report_budget(path) / 1e6:.1f} MB for {n_runs} runs and their analysis figures)")
