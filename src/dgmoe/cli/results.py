"""`dgmoe results RUNS_DIR`: model-selection tables (or single-source tables) from a runs directory."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, TypeVar

import click

from dgmoe.engine.io import write_text_atomic
from dgmoe.errors import UsageError

T = TypeVar("T")


@click.command("results")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--latex", is_flag=True, help="LaTeX (booktabs) instead of Markdown.")
@click.option(
    "--selection", type=click.Choice(["iid", "loo", "oracle", "worst", "worst-id", "wilds", "all"]), default=None,
    help="Model selection: training-domain validation (iid), leave-one-domain-out (loo), test-domain "
    "oracle, worst-group validation on the OOD validation split (worst: WILDS tables for FMoW, iWildCam, ...; "
    "WILDS' default), the same on the ID validation split id_val (worst-id: WILDS' named alternative), WILDS' "
    "official validation metric per dataset on the OOD split (wilds: iWildCam's macro-F1, Camelyon17's "
    "accuracy), or all (the default: DomainBed's three, then worst for the WILDS datasets). Single-source "
    "tables always use training-domain validation.",
)
@click.option("--single-source", is_flag=True,
              help="Single-source DG tables (GMoE Table 3/12) from runs trained on one domain.")
@click.option("--baseline", metavar="MODEL_OR_ALGO", default=None,
              help="With --single-source: the row improvements are measured against: a model (e.g. "
              "vit_tiny_patch16_224, also built with --model-kwargs), an algorithm, or a run --label.")
@click.option("--ood-split", type=click.Choice(["in", "out"]), default="in", show_default=True,
              help="With --single-source: split of the other domains reported as OOD accuracy.")
@click.option("--absolute", is_flag=True, help="With --single-source: improvements in points, not relative %.")
@click.option("--complete-trials", is_flag=True,
              help="Averages table: leave out trial seeds that lack a test domain (DomainBed averages the "
              "domains they have).")
@click.option("--include-unfinished", is_flag=True, help="Also use run dirs that have no 'done' file yet.")
@click.option("--recipe", "recipe_name", metavar="NAME", default=None,
              help="RUNS_DIR is a `dgmoe recipe launch` folder: print the recipe's rows, the paper's numbers beside "
              "the obtained ones and the difference (saved as RUNS_DIR/results_recipe.md).")
@click.option("--hparams", "show_hparams", is_flag=True,
              help="After each dataset's table, the runs its cells selected: per domain and trial seed the hparams "
              "draw, step, test accuracy, the hparams that differ between runs and the run folder (log, config).")
@click.option("--page", "write_page", is_flag=True,
              help="Also write a results page to publish, RUNS_DIR/results_page/index.md and index.html: the tables, "
              "the runs each cell selected with their hparams and per-seed values, and links to each run's log and "
              "config (with --recipe: the paper's numbers first).")
@click.option("--csv", "csv_export", is_flag=True,
              help="Also write the tables as CSV beside the .md/.tex (results.csv, ...): every cell with its mean and "
              "SE, and the protocol lines, the same numbers as the tables.")
@click.option("--no-save", is_flag=True, help="Only print; do not write results.md/.tex into RUNS_DIR.")
def command(runs_dir: Path, latex: bool, selection: str | None, single_source: bool, baseline: str | None,
            ood_split: str, absolute: bool, complete_trials: bool, include_unfinished: bool,
            recipe_name: str | None, show_hparams: bool, write_page: bool, csv_export: bool,
            no_save: bool) -> None:
    """Print results tables for every run under RUNS_DIR and save them as RUNS_DIR/results.md (.tex).

    Cells are mean +/- standard error over trial seeds of the accuracy each selection method picks,
    computed as DomainBed does; X marks a missing cell. Rows are algorithms, "algorithm / model" when a
    table holds several backbones, or the runs' --label. WILDS datasets (FMoW, iWildCam, ...) get accuracy,
    worst-group accuracy and macro-F1 of each held-out split under worst-group validation. With --single-source
    the tables are saved as RUNS_DIR/results_single_source.md (.tex); with --recipe NAME, a paper's table beside
    the obtained numbers, as RUNS_DIR/results_recipe.md (.tex). Every table starts with its protocol: selection,
    steps, trials, hparams draws, pretrained weights (name and hash), image counts per domain and dgmoe's version.
    """
    if (csv_export or write_page) and no_save:
        raise click.UsageError("--csv and --page write into RUNS_DIR; they do not combine with --no-save")
    if write_page and single_source:
        raise click.UsageError("--page does not apply with --single-source")
    if recipe_name is not None:
        if single_source or selection or baseline or show_hparams or complete_trials or include_unfinished \
                or ood_split != "in":
            raise click.UsageError("--recipe takes its selection and tables from the recipe; it combines with "
                                   "--latex, --csv and --no-save only")
        _recipe_results(runs_dir, recipe_name, latex, no_save, csv_export, write_page)
        return
    if not single_source and (baseline or absolute or ood_split != "in"):
        raise click.UsageError("--baseline, --ood-split and --absolute only apply with --single-source")
    if single_source and show_hparams:
        raise click.UsageError("--hparams does not apply with --single-source")
    if single_source and complete_trials:
        raise click.UsageError("--complete-trials does not apply with --single-source")
    if single_source and selection is not None:
        raise click.UsageError("--selection does not apply with --single-source (training-domain validation)")
    from dgmoe.report.collect import load_records  # pandas: loaded once the arguments are known to be right
    from dgmoe.report.results import results_tables
    from dgmoe.report.single_source import single_source_table

    try:
        records = _echo_warnings(lambda: load_records(runs_dir, include_unfinished=include_unfinished))
        if records.empty:
            raise UsageError(f"no records: no finished run with a results.jsonl under {runs_dir}")

        def render(as_latex: bool) -> str:
            if single_source:
                return single_source_table(records, baseline=baseline, ood_split=ood_split,  # type: ignore[arg-type]
                                           improvement_kind="absolute" if absolute else "relative", latex=as_latex)
            return results_tables(records, selection=selection or "all", latex=as_latex,
                                  complete_trials=complete_trials, hparams=show_hparams)

        text = render(latex)
        markdown = render(False) if csv_export and latex else text
    except UsageError:
        raise
    except (ValueError, KeyError) as err:
        raise UsageError(str(err)) from None
    stem = runs_dir / ("results_single_source" if single_source else "results")
    _show(text, None if no_save else stem.with_suffix(".tex" if latex else ".md"))
    if csv_export:
        _write_csv(markdown, stem.with_suffix(".csv"))
    if write_page:
        _write_page(runs_dir, records, f"Results: {runs_dir.name}", selection or "all")


def _echo_warnings(compute: Callable[[], T]) -> T:
    """`compute()`, with the warnings it raised (skipped or odd runs) printed as lines on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = compute()
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    return value


def _show(text: str, path: Path | None) -> None:
    """Print the tables and, unless `path` is None (--no-save), write them there."""
    click.echo(text, nl=False)
    if path is not None:
        write_text_atomic(path, text)
        click.echo(f"wrote {path}", err=True)


def _write_csv(markdown: str, path: Path) -> None:
    from dgmoe.report.exports import tables_csv

    write_text_atomic(path, tables_csv(markdown))
    click.echo(f"wrote {path}", err=True)


def _write_page(runs_dir: Path, records, title: str, selection: str, intro: str | None = None) -> None:
    from dgmoe.report.publish import results_page

    try:
        paths = results_page(records, runs_dir / "results_page", title, selection, intro)
    except ValueError as err:
        raise UsageError(f"--page: {err}") from None
    click.echo(f"wrote {paths[0]} and {paths[1].name}", err=True)


def _recipe_results(runs_dir: Path, name: str, latex: bool, no_save: bool, csv_export: bool = False,
                    write_page: bool = False) -> None:
    from dgmoe.recipes import get_recipe
    from dgmoe.recipes.compare import comparison

    recipe = get_recipe(name)
    try:
        text = _echo_warnings(lambda: comparison(recipe, runs_dir, latex=latex))
        markdown = comparison(recipe, runs_dir) if (csv_export or write_page) and latex else text
    except UsageError:
        raise
    except (ValueError, KeyError) as err:
        raise UsageError(str(err)) from None
    _show(text, None if no_save else runs_dir / ("results_recipe.tex" if latex else "results_recipe.md"))
    if csv_export:
        _write_csv(markdown, runs_dir / "results_recipe.csv")
    if write_page:
        from dgmoe.recipes.compare import all_records

        intro = markdown if not latex else comparison(recipe, runs_dir)
        _write_page(runs_dir, all_records(runs_dir), f"Recipe {recipe.name}: results", "all", intro)
