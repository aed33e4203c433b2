"""The table model every results builder returns: a `Document` of headings, text, protocol lines and `Table`s of
`Cell`s that carry their numbers (a mean and its standard error, or text), rendered to Markdown, LaTeX, CSV and
HTML from the one object, so that no format is computed twice or read back from another.

A `Cell` prints its mean to `decimals` places ("72.5 +/- 0.4" in Markdown, "72.5 $\\pm$ 0.4" in LaTeX) and gives
the CSV export the same numbers as shown (`Cell.numbers`); the renderers of `dgmoe.tables` lay the cells out
(Markdown byte for byte as pandas/tabulate's pipe format, booktabs LaTeX, a scrolling HTML table).
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence, Union

from dgmoe.tables import (
    Align,
    Anchors,
    csv_text,
    heading,
    html_table,
    html_text,
    latex_escape,
    latex_table,
    markdown_table,
    one_line,
    shown,
)


@dataclass(frozen=True)
class Cell:
    """One cell: text, or a number `mean` (with its standard error `se`, or a standard deviation `sd`) shown to
    `decimals` places, `+` signed with `signed`, followed by `unit` and `suffix` text ("12.3 +/- 0.4 (2/3)",
    "4.5%", "+1.2", "51.2 ± 1.0").

    A standard error is printed "+/- " (LaTeX `$\\pm$`), a standard deviation (the spread over seeds of the
    experiments' tables) " ± " in every format; a cell carries one or the other, never both."""

    text: str = ""
    mean: float | None = None
    se: float | None = None
    decimals: int = 1
    unit: str = ""
    suffix: str = ""
    signed: bool = False
    links: tuple[tuple[str, str], ...] = ()  # (text, relative address): a text cell shown as links (a page)
    sd: float | None = None

    def __post_init__(self) -> None:
        if self.se is not None and self.sd is not None:
            raise ValueError("a cell carries a standard error (se) or a standard deviation (sd), not both")

    def _number(self, value: float, sign: bool = False) -> str:
        return f"{value:{'+' if sign else ''}.{self.decimals}f}"

    def numbers(self) -> tuple[float | None, float | None]:
        """(mean, se) as the table shows them (rounded to `decimals`); (None, None) for a text cell."""
        if self.mean is None:
            return None, None
        return float(self._number(self.mean)), None if self.se is None else float(self._number(self.se))

    def deviation(self) -> float | None:
        """The standard deviation `sd` as the table shows it (rounded to `decimals`), or None."""
        return None if self.sd is None else float(self._number(self.sd))

    def render(self, latex: bool = False) -> str:
        """The cell's Markdown text (before pipe escaping), or its LaTeX (text escaped, `$\\pm$`)."""
        esc = latex_escape if latex else (lambda t: t)
        if self.links and not latex:
            return ", ".join(f"[{name}]({address})" for name, address in self.links)
        if self.mean is None:
            return esc(self.text)
        text = self._number(self.mean, self.signed)
        if self.se is not None:
            text += (" $\\pm$ " if latex else " +/- ") + self._number(self.se)
        if self.sd is not None:
            text += " ± " + self._number(self.sd)
        return text + esc(self.unit + self.suffix)

    def html(self) -> str:
        if self.links:
            return ", ".join(f'<a href="{html.escape(address)}">{html_text(name)}</a>' for name, address in self.links)
        return html_text(shown(self.render()))


MISSING = Cell("X")  # a cell with no data


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cell(value: Any) -> Cell:
    """A `Cell` as it is, a number (an integer shown whole, a float to one decimal), or text."""
    if isinstance(value, Cell):
        return value
    if isinstance(value, bool) or value is None:
        return Cell("" if value is None else str(value))
    if isinstance(value, int):
        return Cell(mean=value, decimals=0)
    if isinstance(value, float):
        return Cell(mean=value)
    return Cell(str(value))


@dataclass(frozen=True)
class Table:
    """A titled table: `columns` titles, rows of cells (the first, the row's label), notes printed after it.

    `Table.make` takes cells as `Cell`s, numbers or text (`cell`)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    notes: tuple["Text", ...] = ()
    left: int = 1
    align: tuple[Align, ...] = ()  # per column, in place of `left` (Markdown)

    @classmethod
    def make(cls, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
             notes: Sequence["Text"] = (), left: int = 1) -> "Table":
        out = tuple(tuple(cell(c) for c in row) for row in rows)
        if any(len(r) != len(columns) for r in out):
            raise ValueError(f"table {title!r}: every row needs {len(columns)} cells, as the columns")
        return cls(title, tuple(columns), out, tuple(notes), left)

    @classmethod
    def from_records(cls, title: str, records: Sequence[dict[str, Any]], decimals: int = 1) -> "Table":
        """Rows given as dicts, as pandas prints a `DataFrame` of them: the columns in order of first appearance
        (a missing value blank), floats to `decimals`, integers whole; a column of numbers only (or of text that
        reads as one) aligned right, any other left."""
        columns = list(dict.fromkeys(k for r in records for k in r))
        rows = [[Cell(mean=v, decimals=decimals) if isinstance(v, float) else cell(v) for v in
                 (r.get(c) for c in columns)] for r in records]
        align: list[Align] = ["right" if rows and all(c.mean is not None or _reads_as_number(c.text)
                                                      for c in col) else "left" for col in zip(*rows)]
        table = cls.make(title, columns, rows)
        return cls(table.title, table.columns, table.rows, align=tuple(align) if rows else ())

    def cells(self, latex: bool = False) -> list[list[str]]:
        return [[c.render(latex) for c in row] for row in self.rows]

    def markdown(self, title: bool = True) -> str:
        """The table under its level-3 heading (or alone, without `title` or with an empty title), then its
        notes."""
        body = markdown_table(self.columns, self.cells(), self.left, self.align or None)
        return "\n\n".join([heading(self.title, 3) + "\n\n" + body if title and self.title else body,
                            *(n.markdown() for n in self.notes)])

    def latex(self) -> str:
        body = "\\begin{center}\n" + latex_table(self.columns, self.cells(latex=True)) + "\n\\end{center}"
        head = [heading(self.title, 3, latex=True)] if self.title else []
        return "\n\n".join([*head, body, *(n.latex() for n in self.notes)])

    def html(self, level: int = 3, anchor: str = "") -> str:
        head = [f"<h{level}{anchor}>{html_text(self.title)}</h{level}>"] if self.title else []
        body = html_table([html_text(c) for c in self.columns],
                          [[c.html() for c in row] for row in self.rows], self.left)
        return "\n".join([*head, body, *(n.html() for n in self.notes)])

    def records(self, section: str = "") -> Iterator[dict[str, str]]:
        """One CSV row (`CSV_COLUMNS`) per cell that is not a row label."""
        for row in self.rows:
            label = shown(row[0].render())
            for column, c in zip(self.columns[1:], row[1:]):
                mean, se = c.numbers()
                sd = c.deviation()
                yield {"section": section, "table": one_line(self.title), "row": label, "column": one_line(column),
                       "cell": shown(c.render()), "mean": "" if mean is None else repr(mean),
                       "se": "" if se is None else repr(se), "sd": "" if sd is None else repr(sd)}


@dataclass(frozen=True)
class Heading:
    text: str
    level: int

    def markdown(self) -> str:
        return heading(self.text, self.level)

    def latex(self) -> str:
        return heading(self.text, self.level, latex=True)

    def html(self, level: int = 0, anchor: str = "") -> str:
        return f"<h{level or self.level}{anchor}>{html_text(self.text)}</h{level or self.level}>"


@dataclass(frozen=True)
class Text:
    """A paragraph; in LaTeX a comment line (`comment`) or escaped text."""

    text: str
    comment: bool = True

    def markdown(self) -> str:
        return self.text

    def latex(self) -> str:
        return "% " + self.text if self.comment else latex_escape(self.text)

    def html(self) -> str:
        """The paragraph escaped, its `code` spans (a command to run) set as code."""
        return "<p>" + re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(self.text, quote=False)) + "</p>"


@dataclass(frozen=True)
class Preamble:
    """A document's title and what its cells are: a heading and one paragraph, or LaTeX comment lines."""

    title: str
    lines: tuple[str, ...]
    needs: str = "\\usepackage{booktabs}"

    def markdown(self) -> str:
        return heading(self.title, 1) + "\n\n" + " ".join(self.lines)

    def latex(self) -> str:
        return "\n".join([f"% {self.title}", f"% Needs {self.needs}.", *(f"% {s}" for s in self.lines)])

    def html(self) -> str:
        return f"<p>{html.escape(' '.join(self.lines), quote=False)}</p>"


@dataclass(frozen=True)
class Protocol:
    """(name, value) lines saying what the numbers were obtained under: a list under **Protocol.**, or LaTeX
    comment lines."""

    items: tuple[tuple[str, str], ...]

    def markdown(self) -> str:
        return "**Protocol.**\n\n" + "\n".join(f"- {name}: {one_line(value)}" for name, value in self.items)

    def latex(self) -> str:
        return "\n".join(f"% Protocol: {name}: {one_line(value)}" for name, value in self.items)

    def html(self) -> str:
        return "<p><strong>Protocol.</strong></p>\n<ul>" + "".join(
            f"<li>{html_text(name)}: {html_text(value)}</li>" for name, value in self.items) + "</ul>"


Block = Union[Heading, Text, Preamble, Protocol, Table]
#: the CSV export's columns: the section (model selection, or "protocol"), the table's title, the row's label,
#: the column's title, the cell as printed and its numbers as printed (blank where the cell has none): the mean,
#: its standard error (`se`), or the standard deviation over seeds (`sd`, the experiments' "mean ± sd" cells)
CSV_COLUMNS = ("section", "table", "row", "column", "cell", "mean", "se", "sd")


@dataclass(frozen=True)
class Document:
    """Blocks (headings, text, protocol lines, tables) rendered to Markdown, LaTeX, CSV or HTML: every format
    from the same cells, so that no format re-reads another."""

    blocks: tuple[Block, ...]

    def markdown(self) -> str:
        return "\n\n".join(b.markdown() for b in self.blocks) + "\n"

    def latex(self) -> str:
        return "\n\n".join(b.latex() for b in self.blocks) + "\n"

    def text(self, latex: bool = False) -> str:
        return self.latex() if latex else self.markdown()

    def tables(self) -> Iterator[tuple[str, Table]]:
        """(section: the last level-2 heading's text, table) of every table."""
        section = ""
        for b in self.blocks:
            if isinstance(b, Heading) and b.level <= 2:
                section = one_line(b.text) if b.level == 2 else ""
            elif isinstance(b, Table):
                yield section, b

    def csv(self) -> str:
        """Every protocol line and every table cell, one CSV row each (`CSV_COLUMNS`), through the one CSV
        renderer (`dgmoe.tables.csv_text`: no cell reads as a spreadsheet formula)."""
        rows = [{"section": "protocol", "table": "", "row": name, "column": "", "cell": one_line(value), "mean": "",
                 "se": "", "sd": ""} for b in self.blocks if isinstance(b, Protocol) for name, value in b.items]
        rows += [r for section, table in self.tables() for r in table.records(section)]
        return csv_text(CSV_COLUMNS, [[r[c] for c in CSV_COLUMNS] for r in rows])

    def anchored(self, id_prefix: str | None = None, title: bool = True) -> Iterator[tuple[Block, str | None]]:
        """(block, its anchor id) of every block `html` shows (without `title`, not the level-1 heading): the id
        `<prefix>-<slug>` (made unique, `Anchors`) of a heading, a titled table or a shown preamble's title, given
        `id_prefix`; otherwise None."""
        anchors = Anchors(id_prefix)

        def anchor(text: str) -> str | None:
            return None if id_prefix is None else anchors(text)

        for b in self.blocks:
            if isinstance(b, Heading):
                if title or b.level > 1:
                    yield b, anchor(b.text)
            elif isinstance(b, Table):
                yield b, anchor(b.title) if b.title else None  # (an untitled table has no heading)
            elif isinstance(b, Preamble):
                yield b, anchor(b.title) if title else None
            else:
                yield b, None

    def headings(self, level: int, id_prefix: str, title: bool = True) -> list[tuple[str, str]]:
        """(anchor id, text on one line) of every level-`level` heading, as `html` anchors them (a table of
        contents of the rendered page)."""
        return [(a, one_line(b.text)) for b, a in self.anchored(id_prefix, title)
                if isinstance(b, Heading) and b.level == level and a is not None]

    def html(self, heading_offset: int = 0, id_prefix: str | None = None, title: bool = True) -> str:
        """HTML of the blocks, headings `heading_offset` levels down, each with an anchor id `<prefix>-<slug>`
        (made unique) given `id_prefix`; without `title`, the level-1 heading is left out."""
        out = []
        for b, a in self.anchored(id_prefix, title):
            attr = "" if a is None else f' id="{a}"'
            if isinstance(b, Heading):
                out.append(b.html(min(6, b.level + heading_offset), attr))
            elif isinstance(b, Table):
                out.append(b.html(min(6, 3 + heading_offset), attr))
            elif isinstance(b, Preamble):
                if title:
                    out.append(Heading(b.title, 1).html(min(6, 1 + heading_offset), attr))
                out.append(b.html())
            else:
                out.append(b.html())
        return "\n".join(out)
