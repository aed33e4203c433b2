"""`dgmoe results RUNS_DIR`: model-selection tables (or single-source tables) from a runs directory."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

from dgmoe.cli.options import build_config, config_options
from dgmoe.document import Document
from dgmoe.engine.io import write_text_atomic
from dgmoe.errors import UsageError
from dgmoe.report.config import ResultsConfig
from dgmoe.report.test_split import check_selection

T = TypeVar("T")


@click.command("results")
@config_options(ResultsConfig)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """Print results tables for every run under RUNS_DIR and save them as RUNS_DIR/results.md (.tex).

    Cells are mean +/- standard error over trial seeds of the accuracy each selection method picks,
    computed as DomainBed does; X marks a missing cell. Rows are algorithms, "algorithm / model" when a
    table holds several backbones, or the runs' --label. WILDS datasets (FMoW, iWildCam, ...) get accuracy,
    worst-group accuracy and macro-F1 of each held-out split under worst-group validation. With --single-source
    the tables are saved as RUNS_DIR/results_single_source.md (.tex); with --recipe NAME, a paper's table beside
    the obtained numbers, as RUNS_DIR/results_recipe.md (.tex). Every table starts with its protocol: selection,
    steps, trials, hparams draws, pretrained weights (name and hash), image counts per domain and dgmoe's version.
    """
    cfg = build_config(ResultsConfig, ctx, kw)
    runs_dir, latex, selection, single_source, baseline = (Path(cfg.runs_dir), cfg.latex, cfg.selection,
                                                           cfg.single_source, cfg.baseline)
    ood_split, absolute, complete_trials, include_unfinished = (cfg.ood_split, cfg.absolute, cfg.complete_trials,
                                                                cfg.include_unfinished)
    recipe_name, show_hparams, write_page, csv_export, no_save = (cfg.recipe, cfg.hparams, cfg.page, cfg.csv,
                                                                  cfg.no_save)
    if (csv_export or write_page) and no_save:
        raise click.UsageError("--csv and --page write into RUNS_DIR; they do not combine with --no-save")
    if write_page and single_source:
        raise click.UsageError("--page does not apply with --single-source")
    if recipe_name is not None:
        if single_source or selection or baseline or show_hparams or complete_trials or include_unfinished \
                or ood_split != "in" or cfg.test_split != "in":
            raise click.UsageError("--recipe takes its selection, test splits and tables from the recipe; it "
                                   "combines with --latex, --csv and --no-save only")
        _recipe_results(runs_dir, recipe_name, latex, no_save, csv_export, write_page)
        return
    if not single_source and (baseline or absolute or ood_split != "in"):
        raise click.UsageError("--baseline, --ood-split and --absolute only apply with --single-source")
    if single_source and cfg.test_split != "in":
        raise click.UsageError("--test-split applies to DomainBed's tables; with --single-source use --ood-split")
    try:
        check_selection(cfg.test_split, selection or "all")
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    if single_source and show_hparams:
        raise click.UsageError("--hparams does not apply with --single-source")
    if single_source and complete_trials:
        raise click.UsageError("--complete-trials does not apply with --single-source")
    if single_source and selection is not None:
        raise click.UsageError("--selection does not apply with --single-source (training-domain validation)")
    from dgmoe.report.collect import load_records  # pandas: loaded once the arguments are known to be right
    from dgmoe.report.results import results_document
    from dgmoe.report.single_source import single_source_document

    try:
        records = _echo_warnings(lambda: load_records(runs_dir, include_unfinished=include_unfinished))
        if records.empty:
            raise UsageError(f"no records: no finished run with a results.jsonl under {runs_dir}")
        if single_source:
            document = single_source_document(records, baseline=baseline, ood_split=ood_split,  # type: ignore[arg-type]
                                              improvement_kind="absolute" if absolute else "relative")
        else:
            document = results_document(records, selection=selection or "all", complete_trials=complete_trials,
                                        hparams=show_hparams, shift_fit=cfg.shift_fit, test_split=cfg.test_split)
    except UsageError:
        raise
    except (ValueError, KeyError) as err:
        raise UsageError(str(err)) from None
    stem = runs_dir / ("results_single_source" if single_source else "results")
    _show(document.text(latex), None if no_save else stem.with_suffix(".tex" if latex else ".md"))
    if csv_export:
        _write_csv(document, stem.with_suffix(".csv"))
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


def _write_csv(document: Document, path: Path) -> None:
    """The CSV export (`Document.csv`): every cell of every table, from the cells the text shows."""
    write_text_atomic(path, document.csv())
    click.echo(f"wrote {path}", err=True)


def _write_page(runs_dir: Path, records, title: str, selection: str, intro: Document | None = None) -> None:
    from dgmoe.report.publish import results_page

    try:
        paths = results_page(records, runs_dir / "results_page", title, selection, intro)
    except ValueError as err:
        raise UsageError(f"--page: {err}") from None
    click.echo(f"wrote {paths[0]} and {paths[1].name}", err=True)


def _recipe_results(runs_dir: Path, name: str, latex: bool, no_save: bool, csv_export: bool = False,
                    write_page: bool = False) -> None:
    from dgmoe.recipes import get_recipe
    from dgmoe.recipes.compare import comparison_document

    recipe = get_recipe(name)
    try:
        document = _echo_warnings(lambda: comparison_document(recipe, runs_dir))
    except UsageError:
        raise
    except (ValueError, KeyError) as err:
        raise UsageError(str(err)) from None
    _show(document.text(latex), None if no_save else runs_dir / f"results_recipe.{'tex' if latex else 'md'}")
    if csv_export:
        _write_csv(document, runs_dir / "results_recipe.csv")
    if write_page:
        from dgmoe.recipes.compare import all_records

        _write_page(runs_dir, all_records(runs_dir), f"Recipe {recipe.name}: results", "all", document)
