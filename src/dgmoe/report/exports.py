"""CSV exports of the tables `dgmoe results` prints: every cell of every Markdown table, one CSV row each, with
the protocol lines as rows of their own, so that a spreadsheet or a paper's script reads the same numbers the
Markdown and LaTeX tables show (no second computation that could round differently).

Columns: `section` (the model selection, or "protocol"), `table` (dataset, "Averages", ...), `row`, `column`,
`cell` (the text as printed), `mean` and `se` (the numbers of a "mean +/- se" cell, blank otherwise).
"""
from __future__ import annotations

import csv
import io
import re
from typing import Iterator

from dgmoe.tables import table_cells

CSV_COLUMNS = ("section", "table", "row", "column", "cell", "mean", "se")
_NUMBER = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)%?(?:\s*(?:\+/-|\$\\pm\$)\s*(\d+(?:\.\d+)?))?")


def cell_numbers(cell: str) -> tuple[float | None, float | None]:
    """(mean, se) of a cell reading "12.3 +/- 0.4" (or LaTeX's "12.3 $\\pm$ 0.4"), (value, None) of "12.3",
    (None, None) of "X" or text."""
    found = _NUMBER.match(cell)
    if not found:
        return None, None
    return float(found.group(1)), float(found.group(2)) if found.group(2) else None


def markdown_cells(text: str) -> Iterator[dict[str, str]]:
    """Every protocol line and table cell of a `dgmoe results` Markdown text, as CSV rows (dicts)."""
    section = table = ""
    header: list[str] | None = None
    in_protocol = False
    for line in text.splitlines():
        if line.startswith("## "):
            section, header, in_protocol = line[3:].strip(), None, False
        elif line.startswith("### "):
            table, header, in_protocol = line[4:].strip(), None, False
        elif line.strip() == "**Protocol.**":
            in_protocol = True
        elif in_protocol and line.startswith("- ") and ": " in line:
            name, value = line[2:].split(": ", 1)
            yield {"section": "protocol", "table": "", "row": name, "column": "", "cell": value, "mean": "", "se": ""}
        elif line.startswith("|"):
            cells = table_cells(line)
            if header is None:
                header = cells
            elif not all(set(c) <= set(":-") for c in cells):
                for column, cell in zip(header[1:], cells[1:]):
                    mean, se = cell_numbers(cell)
                    yield {"section": section, "table": table, "row": cells[0], "column": column, "cell": cell,
                           "mean": "" if mean is None else repr(mean), "se": "" if se is None else repr(se)}
        elif not line.strip():
            header = None


def tables_csv(markdown: str) -> str:
    """The CSV export of a `dgmoe results` Markdown text (see the module docstring)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in markdown_cells(markdown):
        writer.writerow(row)
    return out.getvalue()


def latex_numbers(latex: str) -> list[tuple[float | None, float | None]]:
    """(mean, se) of every data cell of every booktabs table of a LaTeX text, in order (for round-trip checks)."""
    out: list[tuple[float | None, float | None]] = []
    inside = False
    for line in latex.splitlines():
        if line.startswith("\\midrule"):
            inside = True
        elif line.startswith("\\bottomrule"):
            inside = False
        elif inside and line.endswith("\\\\"):
            out += [cell_numbers(c) for c in line[:-2].split(" & ")[1:]]
    return out
