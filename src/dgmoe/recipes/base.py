"""What a recipe is: one table (or figure) of a seed paper, as data.

A `Recipe` declares, once, everything `dgmoe recipe show`, `launch` and `dgmoe results --recipe` need:

- its `rows` (`Row`): the paper's row label, the algorithm and backbone that produce it, and its published
  `cells` (`Cell`: dataset, column, value +/- SE as printed in the paper's text, with the table it comes from);
- its `parts` (`Part`): the sweeps that produce the rows, each a DomainBed grid (datasets x algorithms x
  models x held-out sets x hparams seeds x trials) with the run settings its jobs share (the paper's hparams
  overrides, steps, checkpoint frequency, model kwargs) and the pretrained weights it expects (`Weights`);
- its model `selection` method and its kind: `domainbed` (DomainBed tables), `single_source` (GMoE Tables
  3 and 12), `wilds` (official WILDS metrics, MoGE Table 1), `cost` (step time and memory, run in this
  process) or `synthetic` (GMoE App. B.2, run in this process).

A row the paper shows but dgmoe cannot produce has `unavailable` set to the reason; it is shown, never
launched. A cell whose value the paper only plots (a figure), or a cell of a row dgmoe adds (`added`, its own
baseline), has `value=None`: its obtained number is still reported. Construction checks the recipe (every
runnable row's cells map to exactly one part, every part serves a row, names are known), so a malformed recipe
fails on import.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping

from dgmoe.experiments.config import SyntheticConfig
from dgmoe.posthoc.config import WISE_FT_ALPHAS
from dgmoe.recipes.sources import Source

Kind = Literal["domainbed", "single_source", "wilds", "cost", "synthetic"]
KINDS: tuple[str, ...] = ("domainbed", "single_source", "wilds", "cost", "synthetic")
SWEEP_KINDS: tuple[str, ...] = ("domainbed", "single_source", "wilds")
#: the selection methods of `dgmoe.selection` by the names papers use
SELECTION_NAMES = {"iid": "training-domain validation (train-val)", "loo": "leave-one-domain-out (lodo)",
                   "oracle": "test-domain validation (oracle)", "worst": "worst-group validation (WILDS)",
                   "single-source": "the training domain's validation split (single-source)"}
#: how the papers' tables name the selection methods
SELECTION_SHORT = {"iid": "train-val", "loo": "lodo", "oracle": "oracle", "worst": "worst-group"}
#: `Cell.column` of a dataset's average over its held-out domains (DomainBed's per-dataset number)
AVG = "avg"
#: `Cell.column` of a single-source row's mean accuracy over the domains it was not trained on
OOD_AVG = "OOD avg"
#: `Cell.column` of a shift suite's mean over its shifts, per trial seed (`dgmoe.report.shifts.AVG_SHIFTS`)
AVG_SHIFTS = "Avg shifts"
#: `Cell.dataset` of a row's mean over its other datasets' averages (CLIPood's "Avg" over DomainBed's five)
ACROSS = "mean over the datasets"
#: `Cell.split`: which images of a held-out domain a number is read on: DomainBed's `in` (80%,
#: `model_selection.py`), CLIPood's `out` (20%, its `converter_domainbed.py`), or the whole domain (`all`: shift
#: suites, WILDS splits)
SPLITS = ("in", "out", "all")


@dataclass(frozen=True)
class Weights:
    """A pretrained checkpoint a part expects: `key` names it on the command line (`--pretrained KEY=FILE`),
    `hint` is the file name looked for in a `--pretrained DIR`, `source` says where it comes from."""

    key: str
    hint: str
    source: str


@dataclass(frozen=True)
class Cell:
    """One published number: `value` (+/- `se`) of `column` on `dataset`, as the paper's text prints it.

    `column` is `AVG`, a domain name (a held-out domain's accuracy; single-source: an evaluation domain,
    with the training domain in `source`), `<split> <metric>` for WILDS (`test acc_worst_group`,
    `test acc_avg`, `id_test f1_macro`), or a cost (`step_time_s`, `memory_gb`). `fraction`: printed as
    a fraction (iWildCam's F1 0.495), compared with the obtained percentage / 100. `value=None`: the paper
    plots it only. `selection` overrides the recipe's (GMoE Table 9's lodo column)."""

    dataset: str
    column: str = AVG
    value: float | None = None
    se: float | None = None
    selection: str | None = None
    source: str | None = None
    fraction: bool = False
    digits: int = 1  # decimals the paper prints (MoGE: 2; iWildCam's F1: 3); obtained numbers get as many
    split: str = "in"  # the held-out domain's images the paper tested on (`SPLITS`); obtained on the same

    @property
    def group(self) -> str:
        """The results table the cell is printed in: its dataset, with the training domain if single-source."""
        return f"{self.dataset}: trained on {self.source}" if self.source else self.dataset


@dataclass(frozen=True)
class Row:
    """A row of the paper's table: `label` as printed, the `algorithm` and `model` that produce it.

    `part`: the part that runs it where several parts hold the same algorithm and model (e.g. 5K and 15K
    steps); `quoted`: the work the paper quotes the row from (it is still run: DomainBed's protocol, by
    dgmoe); `unavailable`: why dgmoe cannot produce the row (shown, never launched); `added`: why dgmoe adds
    a row the paper does not have (its own baseline: cells without a value, obtained numbers only).
    `source`: where the row's numbers were read (`dgmoe.recipes.sources.Source`: paper, table, row, status), for
    a recipe whose rows come from several papers; `best_of`: the row is each column's best over these
    algorithms' obtained numbers (WiSE-FT's "optimal alpha", one per column)."""

    label: str
    algorithm: str
    model: str
    cells: tuple[Cell, ...] = ()
    part: str | None = None
    quoted: str = ""
    unavailable: str = ""
    added: str = ""
    source: Source | None = None
    best_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class WiseFT:
    """A part that runs no sweep but makes WiSE-FT soups of two other parts' runs (`dgmoe soup --method wise-ft`):
    each run of `fine_tuned` against the run of `zero_shot` that holds out the same domains with the same trial
    seed, at every alpha of `alphas` and at the alpha training-domain validation picks."""

    fine_tuned: str
    zero_shot: str
    alphas: tuple[float, ...] = WISE_FT_ALPHAS


def wise_ft_algorithm(algorithm: str, alpha: float | None = None) -> str:
    """The row name `dgmoe soup` gives a WiSE-FT soup of `algorithm`'s runs (`dgmoe.posthoc.plans.Plan.algorithm`):
    at `alpha`, or (None) at the alpha training-domain validation picks."""
    return f"{algorithm} (WiSE-FT{'' if alpha is None else f' alpha={alpha:g}'})"


@dataclass(frozen=True)
class Part:
    """One sweep of a recipe, launched into `<output-dir>/<name>`: the grid datasets x algorithms x models,
    every held-out domain alone (`single_test_envs`), also the pairs (leave-one-domain-out selection), or
    `test_env_sets`; `n_hparams` DomainBed hparams seeds (0 = defaults and the overrides) x `n_trials`.

    `settings` are flat `RunConfig` keys every job shares (`hparams`, `model_kwargs`, `steps`,
    `patch_size`, ...); `per_dataset` adds or replaces them for one dataset (their `hparams` and
    `model_kwargs` are merged). `pretrained` names the `Weights` loaded into the backbone;
    `location_weights` those of MoGE's plug-in location encoder (`location_encoder="pretrained"`)."""

    name: str
    datasets: tuple[str, ...]
    algorithms: tuple[str, ...]
    models: tuple[str, ...]
    pretrained: str | None = None
    location_weights: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    per_dataset: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    n_hparams: int = 1
    n_trials: int = 3
    single_test_envs: bool = True
    test_env_sets: tuple[tuple[int, ...], ...] = ()
    wise_ft: WiseFT | None = None  # a soup part: its runs are WiSE-FT soups of two other parts' runs

    def weight_keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.pretrained, self.location_weights) if k)

    def holds(self, row: Row, dataset: str) -> bool:
        return dataset in self.datasets and row.algorithm in self.algorithms and row.model in self.models


@dataclass(frozen=True)
class CostBench:
    """A cost table's measurement (`kind="cost"`): every row's training step on random images, timed as
    `dgmoe algorithms bench` does; `reference` is the row the others are divided by."""

    img_size: int = 224
    domains: int = 5
    batch_per_domain: int = 32
    steps: int = 10
    warmup: int = 2
    reference: str = "ERM"


@dataclass(frozen=True)
class Recipe:
    """One table of a seed paper (see the module docstring)."""

    name: str
    paper: str
    table: str
    title: str
    kind: Kind
    rows: tuple[Row, ...]
    parts: tuple[Part, ...] = ()
    selection: str | None = "iid"
    weights: tuple[Weights, ...] = ()
    notes: tuple[str, ...] = ()
    baseline: str | None = None  # single-source: the row "IID Imp." / "OOD Imp." are measured against
    cost: CostBench | None = None
    synthetic: SyntheticConfig | None = None
    synthetic_seeds: tuple[int, ...] = (0, 1, 2)

    def __post_init__(self) -> None:
        check_recipe(self)

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(f"recipe {self.name} has no part {name!r}; parts: {[p.name for p in self.parts]}")

    def row(self, label: str) -> Row:
        for row in self.rows:
            if row.label == label:
                return row
        raise KeyError(f"recipe {self.name} has no row {label!r}; rows: {[r.label for r in self.rows]}")

    def weights_of(self, key: str) -> Weights:
        return next(w for w in self.weights if w.key == key)

    def row_part(self, row: Row, dataset: str) -> Part | None:
        """The part whose jobs give `row`'s numbers on `dataset` (None: no part runs it)."""
        found = [p for p in self.parts if p.holds(row, dataset) and row.part in (None, p.name)]
        return found[0] if len(found) == 1 else None


def column_keys(rows: Iterable[Row], keep: Callable[[Cell], bool]) -> list[tuple[str, str, str | None]]:
    """(dataset, column, selection) of the kept cells in table order: the order of the row that has the most of
    them, then the others as they come."""
    per_row = [[(c.dataset, c.column, c.selection) for c in r.cells if keep(c)] for r in rows]
    widest = max(per_row, key=len, default=[])
    return list(dict.fromkeys([*widest, *(k for keys in per_row for k in keys)]))


def check_recipe(recipe: Recipe) -> None:
    """Refuse an inconsistent recipe (a programming error in the recipe modules, so a ValueError)."""
    where = f"recipe {recipe.name}"
    if recipe.kind not in KINDS:
        raise ValueError(f"{where}: kind {recipe.kind!r} is not one of {KINDS}")
    if recipe.selection is not None and recipe.selection not in SELECTION_NAMES:
        raise ValueError(f"{where}: unknown selection {recipe.selection!r}")
    labels = [r.label for r in recipe.rows]
    if len(set(labels)) != len(labels) or not labels:
        raise ValueError(f"{where}: row labels must be unique and there must be rows: {labels}")
    names = [p.name for p in recipe.parts]
    keys = {w.key for w in recipe.weights}
    if len(set(names)) != len(names) or any(not re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in names):
        raise ValueError(f"{where}: part names must be unique folder names: {names}")
    for part in recipe.parts:
        unknown = [k for k in part.weight_keys() if k not in keys]
        if unknown:
            raise ValueError(f"{where}: part {part.name} expects undeclared weights {unknown}")
        stray = [d for d in part.per_dataset if d not in part.datasets]
        if stray:
            raise ValueError(f"{where}: part {part.name} has settings for datasets it does not run: {stray}")
        if part.wise_ft is not None:
            _check_wise_ft(recipe, part)
    for row in recipe.rows:
        if row.added and (row.unavailable or any(c.value is not None for c in row.cells)):
            raise ValueError(f"{where}: row {row.label!r} is dgmoe's own: it is run and has no published value")
    if recipe.kind in SWEEP_KINDS:
        used = set()
        for row in recipe.rows:
            if row.unavailable:
                continue
            for cell in (c for c in row.cells if c.dataset != ACROSS):
                found = recipe.row_part(row, cell.dataset)
                if found is None:
                    raise ValueError(f"{where}: row {row.label!r} on {cell.dataset} maps to no part or to several")
                used.add(found.name)
        idle = [n for n in names if n not in used]
        if idle:
            raise ValueError(f"{where}: parts {idle} serve no row")
    for row in recipe.rows:
        bad = [c.split for c in row.cells if c.split not in SPLITS]
        if bad:
            raise ValueError(f"{where}: row {row.label!r} has a cell of split {bad[0]!r}, not one of {SPLITS}")
        printed = [] if row.source is None else [t for t in row.source.numbers.split() if t != "-"]
        if row.source is not None and row.cells and len(printed) != len(row.cells):
            raise ValueError(f"{where}: row {row.label!r} has {len(row.cells)} cells and its source "
                             f"{len(printed)} numbers")
    if recipe.kind == "single_source" and recipe.baseline and recipe.baseline not in labels:
        raise ValueError(f"{where}: baseline {recipe.baseline!r} is not a row")
    if recipe.kind == "cost" and (recipe.cost is None or recipe.cost.reference not in labels):
        raise ValueError(f"{where}: a cost recipe needs `cost` with a reference row")
    if recipe.kind == "synthetic" and recipe.synthetic is None:
        raise ValueError(f"{where}: a synthetic recipe needs `synthetic`")


def _check_wise_ft(recipe: Recipe, part: Part) -> None:
    """A soup part's two parts exist, run sweeps, and cover its datasets and models."""
    assert part.wise_ft is not None
    names = {p.name: p for p in recipe.parts}
    for name in (part.wise_ft.fine_tuned, part.wise_ft.zero_shot):
        source = names.get(name)
        if source is None or source.wise_ft is not None:
            raise ValueError(f"recipe {recipe.name}: soup part {part.name} names {name!r}, not a sweep part")
        if not set(part.datasets) <= set(source.datasets) or not set(part.models) <= set(source.models):
            raise ValueError(f"recipe {recipe.name}: soup part {part.name} needs runs of {part.datasets} x "
                             f"{part.models} that part {name} does not run")


def soup_sources(recipe: Recipe) -> set[str]:
    """The parts whose runs a soup part of `recipe` averages (they must keep their weights)."""
    return {n for p in recipe.parts if p.wise_ft for n in (p.wise_ft.fine_tuned, p.wise_ft.zero_shot)}


# --- writing the paper's numbers compactly ------------------------------------------------------------------

_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)(?:\u00b1(\d+(?:\.\d+)?))?$")


def cells(datasets: tuple[str, ...], text: str, column: str = AVG, **kw: Any) -> tuple[Cell, ...]:
    """Cells of one printed row: `text` holds one number per dataset, `88.1±0.1` or `42.7`, or `-` where the
    paper prints none (e.g. GMoE Table 9's "—")."""
    tokens = text.split()
    if len(tokens) != len(datasets):
        raise ValueError(f"{len(tokens)} numbers for {len(datasets)} datasets: {text!r}")
    out = []
    for dataset, token in zip(datasets, tokens):
        if token == "-":
            continue
        match = _NUMBER.match(token)
        if not match:
            raise ValueError(f"not a number: {token!r} in {text!r}")
        digits = len(match.group(1).partition(".")[2])
        out.append(Cell(dataset, column, float(match.group(1)), float(match.group(2)) if match.group(2) else None,
                        digits=digits, **kw))
    return tuple(out)


def columns(dataset: str, names: tuple[str, ...], text: str, **kw: Any) -> tuple[Cell, ...]:
    """Cells of one printed row over several columns of one dataset (domains, metrics)."""
    return tuple(Cell(dataset, c.dataset, c.value, c.se, digits=c.digits, **kw) for c in cells(names, text))


def plotted(datasets: tuple[str, ...], column: str = AVG, **kw: Any) -> tuple[Cell, ...]:
    """Cells the paper shows in a figure only: obtained numbers are reported, no published value."""
    return tuple(Cell(d, column, **kw) for d in datasets)
