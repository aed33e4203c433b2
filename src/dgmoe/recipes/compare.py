"""`dgmoe results DIR --recipe NAME`: the obtained numbers beside the paper's, with the difference.

Every obtained number comes from the code that makes dgmoe's own tables, on the records of the part that
runs the row (`<DIR>/<part>`): DomainBed cells from `dgmoe.selection.sweep_accs` and
`dgmoe.report.tables.cell_accs` (a dataset's average is the Averages table's: per trial seed the mean over
its test domains, then mean +/- SE over seeds), a shift suite's cells (ImageNet -> shifts) from the shift table's
`dgmoe.report.shifts.shift_values`, WILDS cells from `dgmoe.report.wilds.wilds_values`,
single-source cells from `dgmoe.report.single_source` (on the other domains' validation splits, the papers'
wording), costs from the launch's `cost.json` as ratios to the reference row, the synthetic experiment from
its `synthetic.json`. One table per dataset (single-source: per training domain); rows are the recipe's.

A DomainBed cell is read on the held-out domains' split its paper tested on (`Cell.split`: DomainBed's `in`, or
CLIPood's `out`, through `dgmoe.report.test_split`); a row's mean over the datasets (`ACROSS`) is the mean of its
datasets' obtained averages; a best-of row (WiSE-FT's optimal alpha) is each column's best over its rows. A
recipe whose rows cite their own sources prints, per row, the test split and the source (status included), and
under each table every source's whole citation.

At the smoke scale the data are stand-ins: each row's obtained average on the stand-in is printed alone, as
a check of the pipeline, not beside the paper's numbers.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from dgmoe.data.catalogue import get_spec
from dgmoe.document import MISSING as NO_CELL
from dgmoe.document import Block, Document, Heading, Table, Text
from dgmoe.document import Cell as TableCell
from dgmoe.errors import UsageError
from dgmoe.recipes.base import (
    ACROSS,
    AVG,
    AVG_SHIFTS,
    OOD_AVG,
    SELECTION_NAMES,
    SELECTION_SHORT,
    Cell,
    Recipe,
    Row,
    column_keys,
)
from dgmoe.recipes.plan import SMOKE, row_model, row_parts
from dgmoe.recipes.run import COST_FILE, SYNTHETIC_FILE, read_manifest
from dgmoe.report.collect import load_records
from dgmoe.report.protocol import protocol_block
from dgmoe.report.shifts import shift_values, suite_of
from dgmoe.report.single_source import improvement, ood_improvement, single_source_accs
from dgmoe.report.tables import cell_accs, dataset_domains
from dgmoe.report.test_split import DESCRIBE, with_test_split
from dgmoe.report.wilds import wilds_values
from dgmoe.selection import VAL_ENV, mean_and_se, sweep_accs

Stats = tuple[float, float] | None  # mean and SE in % (cost: a ratio)
MISSING = "X"
NO_SE = float("nan")


class Obtained:
    """The obtained numbers of one recipe's output dir, computed on demand and cached per part."""

    def __init__(self, recipe: Recipe, output_dir: Path, scale: str):
        self.recipe, self.dir, self.scale = recipe, output_dir, scale
        self._records: dict[str, pd.DataFrame] = {}
        self._sweeps: dict[tuple[str, str, str], pd.DataFrame] = {}

    def records(self, part: str) -> pd.DataFrame:
        if part not in self._records:
            folder = self.dir / part
            self._records[part] = load_records(folder) if folder.is_dir() else pd.DataFrame()
        return self._records[part]

    def mine(self, row: Row, dataset: str) -> tuple[str, pd.DataFrame]:
        """(part, records of the row's runs on `dataset`) — empty when the part has not run them."""
        if self.scale == "paper":
            part = self.recipe.row_part(row, dataset)
            candidates = [] if part is None else [part.name]
        else:  # the stand-in replaces every dataset: the row's first part, or the part that trained its
            # stand-in configuration once for several parts (`dgmoe.recipes.run`)
            mine = [p.name for p in row_parts(self.recipe, row)]  # (soups are made per part: no other's)
            soups = any(self.recipe.part(n).wise_ft for n in mine)
            candidates = mine + ([] if soups else [p.name for p in self.recipe.parts
                                                   if p.name not in mine and p.wise_ft is None])
        for name in candidates:
            records = self.records(name)
            if records.empty:
                continue
            keep = ((records["dataset"] == dataset) & (records["algorithm"] == row.algorithm)
                    & (records["model_name"] == row_model(row, self.scale)))
            if keep.any():
                return name, records[keep]
        return "", pd.DataFrame()

    def domainbed(self, row: Row, dataset: str, column: str, selection: str, split: str = "in") -> Stats:
        """A DomainBed cell on the held-out domains' `split` (`dgmoe.report.test_split`)."""
        part, mine = self.mine(row, dataset)
        if mine.empty:
            return None
        if (part, selection, split) not in self._sweeps:
            self._sweeps[(part, selection, split)] = sweep_accs(with_test_split(self.records(part), split), selection)
        domains = dataset_domains(mine, dataset)
        env = None if column == AVG else domains.index(column) if column in domains else -1
        label = str(mine["model"].iloc[0])
        sweep = self._sweeps[(part, selection, split)]
        return mean_and_se(cell_accs(sweep, dataset, row.algorithm, label, len(domains), test_env=env))

    def shifts(self, row: Row, cell: Cell) -> Stats:
        """A shift suite's cell (ImageNet -> shifts): the whole held-out domain's accuracy at the checkpoint
        training-domain validation picks, as the shift table (`dgmoe.report.shifts`)."""
        _, mine = self.mine(row, cell.dataset)
        if mine.empty:
            return None
        values = shift_values(mine, cell.dataset).get((row.algorithm, str(mine["model"].iloc[0])), {})
        suite = suite_of(cell.dataset)
        if cell.column == AVG_SHIFTS and suite is not None:  # per trial seed, the mean over the shifts
            n = min((len(values.get(s, [])) for s in suite.shifts), default=0)
            return mean_and_se([float(np.mean([values[s][k] for s in suite.shifts])) for k in range(n)])
        return mean_and_se(values.get(cell.column, []))

    def wilds(self, row: Row, cell: Cell) -> Stats:
        _, mine = self.mine(row, cell.dataset)
        if mine.empty or VAL_ENV not in mine.columns or mine[VAL_ENV].isna().all():
            return None
        split, _, metric = cell.column.partition(" ")
        domains = dataset_domains(mine, cell.dataset)
        values = next(iter(wilds_values(mine, cell.dataset).values()), {})
        return mean_and_se(values.get((domains.index(split), metric), [])) if split in domains else None

    def single_source(self, row: Row, dataset: str, source: str) -> dict[int, float]:
        """{domain index: mean accuracy (%)} of a row trained on `source` (its IID accuracy included)."""
        _, mine = self.mine(row, dataset)
        if mine.empty:
            return {}
        domains = dataset_domains(mine, dataset)
        accs = single_source_accs(mine, ood_split="out")
        accs = accs[accs["train_env"] == domains.index(source)] if source in domains else accs.iloc[0:0]
        return {int(env): stats[0] for env, group in accs.groupby("env")
                if (stats := mean_and_se(group["acc"])) is not None}


    def value(self, row: Row, cell: Cell) -> Stats:
        """The obtained number of one published cell (None: no run yet, or none that can be scored)."""
        if row.best_of:  # each column's best over the rows (WiSE-FT's optimal alpha)
            found = [v for a in row.best_of if (v := self.value(replace(row, algorithm=a, best_of=()), cell))]
            return max(found, key=lambda v: v[0]) if len(found) == len(row.best_of) else None
        if cell.dataset == ACROSS:  # the mean of the row's datasets' averages
            means = [self.value(row, replace(c, split=cell.split)) for c in row.cells if c.dataset != ACROSS]
            return None if not means or None in means else (float(np.mean([m[0] for m in means if m])), NO_SE)
        if self.recipe.kind == "single_source":
            return self.single_source_cell(row, cell)
        if self.recipe.kind == "wilds" and cell.column != AVG:
            return self.wilds(row, cell)
        if suite_of(cell.dataset) is not None:
            return self.shifts(row, cell)
        return self.domainbed(row, cell.dataset, cell.column, cell.selection or self.recipe.selection or "iid",
                              cell.split)

    def paper(self, cell: Cell) -> float | None:
        return cell.value

    def single_source_cell(self, row: Row, cell: Cell) -> Stats:
        """An accuracy (IID or OOD), the OOD average, or GMoE Table 3's improvement over the baseline row."""
        assert cell.source is not None
        mine = self.single_source(row, cell.dataset, cell.source)
        if not mine:
            return None
        names = list(dataset_domains(self.mine(row, cell.dataset)[1], cell.dataset))
        train = names.index(cell.source)
        ood = [e for e in range(len(names)) if e != train]
        if cell.column in names:
            value = mine.get(names.index(cell.column))
            return None if value is None else (value, NO_SE)
        if cell.column == OOD_AVG:
            return (float(np.mean([mine[e] for e in ood])), NO_SE) if all(e in mine for e in ood) else None
        base = self.single_source(self.recipe.row(self.recipe.baseline or ""), cell.dataset, cell.source)
        if not base or any(e not in base or e not in mine for e in range(len(names))):
            return None
        gain = (improvement(mine[train], base[train]) if cell.column == "IID Imp." else
                ood_improvement([mine[e] for e in ood], [base[e] for e in ood]))
        return None if gain is None else (gain, NO_SE)


class CostFile:
    """A cost table's `cost.json`: every row's step time and memory as ratios to the reference row (the
    paper's numbers too, so that machines compare)."""

    def __init__(self, recipe: Recipe, output_dir: Path):
        assert recipe.cost is not None
        path = output_dir / COST_FILE
        self.found = json.loads(path.read_text())["rows"] if path.is_file() else {}
        self.ref = recipe.cost.reference
        self.ref_cells = {c.column: c.value for c in recipe.row(self.ref).cells}

    def value(self, row: Row, cell: Cell) -> Stats:
        mine, ref = self.found.get(row.label), self.found.get(self.ref)
        return None if not mine or not ref else (mine[cell.column] / ref[cell.column], NO_SE)

    def paper(self, cell: Cell) -> float | None:
        ref = self.ref_cells.get(cell.column)
        return None if cell.value is None or not ref else cell.value / ref


class SyntheticFile:
    """GMoE App. B.2's `synthetic.json`: each network's final accuracy per test set, mean +/- SE over seeds."""

    def __init__(self, output_dir: Path):
        path = output_dir / SYNTHETIC_FILE
        self.runs = json.loads(path.read_text())["noiseless"]["runs"] if path.is_file() else []

    def value(self, row: Row, cell: Cell) -> Stats:
        return mean_and_se([r["history"][-1][cell.column] for r in self.runs if r["arch"] == row.model])

    def paper(self, cell: Cell) -> float | None:
        return cell.value


Source = Obtained | CostFile | SyntheticFile


def _fmt(value: float | None, se: float | None, digits: int) -> TableCell:
    if value is None:
        return TableCell("-")
    return TableCell(mean=value, se=se if se is not None and not np.isnan(se) else None, decimals=digits)


def _column_title(cell: Cell, recipe: Recipe) -> str:
    title = {"step_time_s": f"step time / {recipe.cost.reference if recipe.cost else ''}",
             "memory_gb": f"memory / {recipe.cost.reference if recipe.cost else ''}"}.get(cell.column, cell.column)
    if cell.selection and cell.selection != recipe.selection:
        title += f" ({SELECTION_SHORT[cell.selection]})"
    return title


def comparison(recipe: Recipe, output_dir: str | Path, latex: bool = False) -> str:
    """The text `dgmoe results DIR --recipe NAME` prints (see the module docstring), Markdown or LaTeX."""
    return comparison_document(recipe, output_dir).text(latex)


def comparison_document(recipe: Recipe, output_dir: str | Path) -> Document:
    """The paper's table beside the obtained numbers (see the module docstring)."""
    output_dir = Path(output_dir)
    manifest = read_manifest(output_dir)
    if manifest and manifest.get("recipe") != recipe.name:
        raise UsageError(f"{output_dir} holds recipe {manifest.get('recipe')!r}, not {recipe.name!r} (recipe.json)")
    parts = [p.name for p in recipe.parts]
    if not manifest and recipe.kind not in ("cost", "synthetic") and not any((output_dir / n).is_dir() for n in parts):
        raise UsageError(f"{output_dir} holds no run of recipe {recipe.name}: no recipe.json and none of its part "
                         f"folders ({', '.join(parts)}) that `dgmoe recipe run {recipe.name}` writes; pass that "
                         "recipe's --output-dir, or leave out --recipe for the runs' own tables")
    scale = manifest.get("scale", "paper")
    source: Source = (CostFile(recipe, output_dir) if recipe.kind == "cost" else SyntheticFile(output_dir)
                      if recipe.kind == "synthetic" else Obtained(recipe, output_dir, scale))
    smoke = scale == "smoke"
    selection = SELECTION_NAMES.get(recipe.selection or "", "none")
    text = [f"Recipe {recipe.name}: {recipe.paper} {recipe.table}, {recipe.title}. Model selection: {selection}."]
    if smoke and isinstance(source, Obtained):
        stand_in = SMOKE.stand_ins[recipe.kind]
        text.append(f"Smoke scale: {stand_in} and narrow backbones stand in for the paper's data and models; each "
                    f"row's average out-of-domain accuracy (%) on {stand_in} checks the pipeline and is not "
                    "comparable with the paper's numbers, which are not shown."
                    + ("".join(f" Rows on {d}: their first column on its stand-in folders." for d in sorted(
                        {c.dataset for r in recipe.rows for c in r.cells if c.dataset in SMOKE.folder_stand_ins})))
                    + (" Without pair runs at this scale, it selects by training-domain validation."
                       if recipe.selection == "loo" else ""))
        rows = []
        for row in (r for r in recipe.rows if not r.unavailable):
            stats = source.value(row, _smoke_cell(recipe, row))
            rows.append([row.label, row_model(row, "smoke"), NO_CELL if stats is None else _fmt(*stats, 1)])
        tables: list[Block] = [Table.make(stand_in, ["Row", "backbone", "obtained"], rows)]
    else:
        if recipe.kind == "synthetic":
            text.append("paper: '-', the figure plots these (no number in the text); obtained: final accuracy (%), "
                        "mean +/- SE over seeds; X: not run yet.")
        elif recipe.kind == "cost":
            text.append("paper and obtained: each row's step time and peak memory divided by the reference row's "
                        "(absolute numbers depend on the machine); diff = obtained - paper; X: not measured yet.")
        else:
            text.append("paper: as printed (+/- SE over trials where printed; '-': a value the paper only plots); "
                        "obtained: mean +/- SE over trial seeds; diff = obtained - paper; X: no scorable run yet; "
                        "*: a row the paper quotes from other work (obtained: dgmoe's run of it)."
                        + (" +: a row dgmoe adds (its own baseline, no published number: obtained only)."
                           if any(r.added for r in recipe.rows) else "")
                        + (" test split: the held-out domains' images each row is compared on, the paper's: in = "
                           f"{DESCRIBE['in']}; out = {DESCRIBE['out']}; all = each whole evaluation set (shift "
                           "suites). source: where the row's numbers were read (primary: the paper or its authors' "
                           "repository; quoted in: a later work that quotes them)."
                           if any(r.source for r in recipe.rows) else ""))
        if smoke:
            text.append("Smoke scale: the obtained numbers check the pipeline and are not comparable.")
        tables = [_group_table(recipe, source, group)
                  for group in dict.fromkeys(c.group for r in recipe.rows for c in r.cells)]
        unavailable = [f"{r.label}: {r.unavailable}" for r in recipe.rows if r.unavailable]
        if unavailable:
            tables.append(Text("Not run by dgmoe: " + "; ".join(unavailable) + ".", comment=False))
    protocol = protocol_block(all_records(output_dir), selection)
    return Document((Heading("dgmoe results: recipe " + recipe.name, 1), Text(" ".join(text), comment=False),
                     protocol, *tables))


def all_records(output_dir: Path) -> pd.DataFrame:
    """Every finished run's records under a recipe folder, for its protocol lines (the tables warn of problems)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return load_records(output_dir, skip_broken=True)
        except (FileNotFoundError, UsageError):
            return pd.DataFrame(columns=["dataset", "record", "run_dir"])


def _smoke_cell(recipe: Recipe, row: Row) -> Cell:
    """The one number a row has at the smoke scale: its average on the stand-in (single-source: over the
    domains it was not trained on)."""
    stand_in = SMOKE.stand_ins[recipe.kind]
    own = next((c for c in row.cells if c.dataset in SMOKE.folder_stand_ins), None)
    if own is not None:  # ImageNet and its shifts run on their own stand-in folders: the row's first column
        return Cell(own.dataset, own.column)
    if recipe.kind != "single_source":  # no pair runs at the smoke scale: leave-one-domain-out cannot score
        return Cell(stand_in, AVG, selection="iid" if recipe.selection == "loo" else None)
    held_out = row_parts(recipe, row)[0].test_env_sets[0]
    source = next(i for i in range(len(held_out) + 1) if i not in held_out)
    return Cell(stand_in, OOD_AVG, source=get_spec(stand_in).domains[source])


def _group_table(recipe: Recipe, source: Source, group: str) -> Table:
    """One dataset's table: each column's paper, obtained and difference, one line per recipe row."""
    found = [c for r in recipe.rows for c in r.cells if c.group == group]
    keys = [(column, selection) for _, column, selection in column_keys(recipe.rows, lambda c: c.group == group)]
    first = {k: next(c for c in found if (c.column, c.selection) == k) for k in keys}
    single = len(keys) == 1
    cited = any(r.source for r in recipe.rows)
    header = ["Row", *(["test split"] if cited else [])]
    for key in keys:
        title = "" if single else _column_title(first[key], recipe) + ": "
        header += [f"{title}paper", f"{title}obtained", f"{title}diff"]
    rows: list[list[str | TableCell]] = []
    for row in recipe.rows:
        mine = {(c.column, c.selection): c for c in row.cells if c.group == group}
        if not mine:
            continue
        out: list[str | TableCell] = [row.label + (" *" if row.quoted else " +" if row.added else "")]
        if cited:
            out.append(", ".join(dict.fromkeys(c.split for c in mine.values())))
        for key in keys:
            cell = mine.get(key)
            if cell is None:
                out += ["", "", ""]
                continue
            digits = 2 if recipe.kind == "cost" else cell.digits
            paper = source.paper(cell)
            paper_text = _fmt(paper, None if recipe.kind == "cost" else cell.se, digits)
            if row.unavailable:
                out += [paper_text, "not run", ""]
                continue
            stats = source.value(row, cell)
            if stats is not None and cell.fraction:
                stats = (stats[0] / 100, stats[1] / 100)
            diff = TableCell() if stats is None or paper is None else TableCell(mean=stats[0] - paper, decimals=digits,
                                                                                signed=True)
            out += [paper_text, NO_CELL if stats is None else _fmt(*stats, digits), diff]
        rows.append(out + ([row.source.short if row.source else row.added] if cited else []))
    title = f"{recipe.table}: ratios to the {recipe.cost.reference} row" if recipe.cost else group
    if single and recipe.kind not in ("cost", "synthetic"):
        title += f" ({_column_title(first[keys[0]], recipe)})"
    if not cited:
        return Table.make(title, header, rows)
    sources = dict.fromkeys(r.source.text for r in recipe.rows if r.source and any(c.group == group for c in r.cells))
    notes = [Text("Sources: " + " | ".join(sources))] if sources else []
    return Table.make(title, header + ["source"], rows, notes)
