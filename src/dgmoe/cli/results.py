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
    "--selection", type=click.Choice(["iid", "loo", "oracle", "worst", "all"]), default=None,
    help="Model selection: training-domain validation (iid), leave-one-domain-out (loo), test-domain "
    "oracle, worst-group validation (worst: WILDS tables for FMoW, iWildCam, ...), or all (the default: "
    "DomainBed's three, then worst for the WILDS datasets). Single-source tables always use training-domain "
    "validation.",
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
@click.option("--no-save", is_flag=True, help="Only print; do not write results.md/.tex into RUNS_DIR.")
def command(runs_dir: Path, latex: bool, selection: str | None, single_source: bool, baseline: str | None,
            ood_split: str, absolute: bool, complete_trials: bool, include_unfinished: bool,
            recipe_name: str | None, no_save: bool) -> None:
    """Print results tables for every run under RUNS_DIR and save them as RUNS_DIR/results.md (.tex).

    Cells are mean +/- standard error over trial seeds of the accuracy each selection method picks,
    computed as DomainBed does; X marks a missing cell. Rows are algorithms, "algorithm / model" when a
    table holds several backbones, or the runs' --label. WILDS datasets (FMoW, iWildCam, ...) get accuracy,
    worst-group accuracy and macro-F1 of each held-out split under worst-group validation. With --single-source
    the tables are saved as RUNS_DIR/results_single_source.md (.tex); with --recipe NAME, a paper's table beside
    the obtained numbers, as RUNS_DIR/results_recipe.md (.tex).
    """
    if recipe_name is not None:
        if single_source or selection or baseline or complete_trials or include_unfinished or ood_split != "in":
            raise click.UsageError("--recipe takes its selection and tables from the recipe; it combines with "
                                   "--latex and --no-save only")
        _recipe_results(runs_dir, recipe_name, latex, no_save)
        return
    if not single_source and (baseline or absolute or ood_split != "in"):
        raise click.UsageError("--baseline, --ood-split and --absolute only apply with --single-source")
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
        if single_source:
            text = single_source_table(records, baseline=baseline, ood_split=ood_split,  # type: ignore[arg-type]
                                       improvement_kind="absolute" if absolute else "relative", latex=latex)
        else:
            text = results_tables(records, selection=selection or "all", latex=latex,
                                  complete_trials=complete_trials)
    except UsageError:
        raise
    except (ValueError, KeyError) as err:
        raise UsageError(str(err)) from None
    _show(text, None if no_save else runs_dir / (("results_single_source" if single_source else "results")
                                                 + (".tex" if latex else ".md")))


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


def _recipe_results(runs_dir: Path, name: str, latex: bool, no_save: bool) -> None:
    from dgmoe.recipes import get_recipe
    from dgmoe.recipes.compare import comparison

    recipe = get_recipe(name)
    try:
        text = _echo_warnings(lambda: comparison(recipe, runs_dir, latex=latex))
    except UsageError:
        raise
    except (ValueError, KeyError) as err:
        raise UsageError(str(err)) from None
    _show(text, None if no_save else runs_dir / ("results_recipe.tex" if latex else "results_recipe.md"))
