"""`dgmoe report RUNS_DIR`: a static HTML report (overview, grouped run index, pages for the selected runs, figures)
of a runs folder."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dgmoe.cli.options import build_config, config_options
from dgmoe.report.config import ReportConfig


@click.command("report")
@config_options(ReportConfig)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """Results tables, a run index grouped by dataset, algorithm, model and held-out domains (with filter pages
    and each group's runs, paged), the cost table, and pages with the accuracy per step and the `dgmoe analyze`
    figures of the selected runs (readable offline, nothing fetched). The index is written first. Run `dgmoe
    analyze routing RUN` first, or pass --analyze, to add routing maps."""
    from dgmoe.errors import UsageError
    from dgmoe.report.collect import find_results_files
    from dgmoe.report.html import build_report, report_budget, report_size

    cfg = build_config(ReportConfig, ctx, kw)
    runs_dir, out, run_dirs = Path(cfg.runs_dir), Path(cfg.out) if cfg.out else None, tuple(map(Path, cfg.run))
    selection, include, title, pages = cfg.selection, tuple(map(Path, cfg.include)), cfg.title, cfg.pages

    root = runs_dir.resolve()
    outside = [r for r in run_dirs if not r.resolve().is_relative_to(root) or not (r / "results.jsonl").is_file()]
    if outside:
        raise UsageError(f"--run {outside[0]} is not a run folder under {runs_dir} (a folder with results.jsonl)")
    unreadable: list[str] = []
    links: list[str] = []
    n_runs = len(find_results_files(runs_dir, unreadable, links))
    for link in links:
        click.echo(f"warning: not followed: {link}", err=True)
    for folder in unreadable:
        click.echo(f"warning: cannot read {folder}: its runs are left out of the report", err=True)

    notes: dict[str | Path, str] = {}
    if cfg.analyze:
        from dgmoe.analysis.pipeline import analyze_runs

        def log(outcome) -> None:
            if outcome.status == "analysed":
                click.echo(f"analysed {outcome.run}")
            elif outcome.status == "failed":
                click.echo(f"could not analyse {outcome.run}: {outcome.reason}", err=True)
                notes[outcome.run] = f"Could not be analysed: {outcome.reason}"

        outcomes = analyze_runs(runs_dir, cfg.n_images, log=log)
        counts = {s: sum(o.status == s for o in outcomes) for s in ("analysed", "skipped", "failed")}
        click.echo(f"analysis: {counts['analysed']} analysed, {counts['skipped']} already analysed, "
                   f"{counts['failed']} could not be analysed")
    path = build_report(runs_dir, out, selection, include, title, count_params=not cfg.no_params, notes=notes,
                        pages=pages, runs=run_dirs)  # type: ignore[arg-type]
    n_pages = sum(1 for _ in (path.parent / "runs").glob("*.html")) if path.name == "index.html" else None
    pages_text = "" if n_pages is None else f", {n_pages} run page{'' if n_pages == 1 else 's'}"
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB; {report_size(path) / 1e6:.2f} MB with its pages "
               f"and figures, budget {report_budget(path) / 1e6:.1f} MB for {n_runs} run{'' if n_runs == 1 else 's'}"
               f"{pages_text} and their analysis figures)")
