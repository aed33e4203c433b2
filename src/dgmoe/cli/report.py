"""`dgmoe report RUNS_DIR`: a static HTML report (overview, grouped run index, pages for the selected runs, figures)
of a runs folder."""
from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Report folder (index.html, runs/, figures/; default: RUNS_DIR/report/), or an .html file "
                   "(its runs/ and figures/ go to NAME_files/ beside it).")
@click.option("--selection", type=click.Choice(["iid", "loo", "oracle", "worst", "worst-id", "wilds", "all"]),
              default="all", show_default=True,
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
@click.option("--pages", type=click.Choice(["selected", "all", "none"]), default="selected", show_default=True,
              help="Which runs get their own page and accuracy chart: selected (each group's best run, analysed "
                   "runs, those named with --run), all, or none (the index, group and filter pages only).")
@click.option("--run", "run_dirs", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Also write this run folder's page and chart (repeat the flag or space-separate).")
def command(runs_dir: Path, out: Path | None, selection: str, include: tuple[Path, ...], title: str,
            no_params: bool, analyze: bool, n_images: int, pages: str, run_dirs: tuple[Path, ...]) -> None:
    """Results tables, a run index grouped by dataset, algorithm, model and held-out domains (with filter pages
    and each group's runs, paged), the cost table, and pages with the accuracy per step and the `dgmoe analyze`
    figures of the selected runs (readable offline, nothing fetched). The index is written first. Run `dgmoe
    analyze routing RUN` first, or pass --analyze, to add routing maps."""
    from dgmoe.errors import UsageError
    from dgmoe.report.collect import find_results_files
    from dgmoe.report.html import build_report, report_budget, report_size

    root = runs_dir.resolve()
    outside = [r for r in run_dirs if not r.resolve().is_relative_to(root) or not (r / "results.jsonl").is_file()]
    if outside:
        raise UsageError(f"--run {outside[0]} is not a run folder under {runs_dir} (a folder with results.jsonl)")
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
    path = build_report(runs_dir, out, selection, include, title, count_params=not no_params, notes=notes,
                        pages=pages, runs=run_dirs)  # type: ignore[arg-type]
    n_runs = sum(1 for _ in runs_dir.rglob("results.jsonl"))
    n_pages = sum(1 for _ in (path.parent / "runs").glob("*.html")) if path.name == "index.html" else None
    pages_text = "" if n_pages is None else f", {n_pages} run page{'' if n_pages == 1 else 's'}"
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB; {report_size(path) / 1e6:.2f} MB with its pages "
               f"and figures, budget {report_budget(path) / 1e6:.1f} MB for {n_runs} run{'' if n_runs == 1 else 's'}"
               f"{pages_text} and their analysis figures)")
