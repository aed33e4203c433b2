"""The one table renderer: a Markdown pipe table, a booktabs `tabular` or an HTML table, from a header and rows
of strings (the table model, `dgmoe.document`, renders through it).

It sits at the bottom of the package (no imports of dgmoe, numpy or pandas) so that every package that prints
a table (results tables in `dgmoe.report`, analysis summaries, benchmark and sweep estimates, experiment
reports) renders it the same way. The Markdown form is what pandas' `to_markdown(index=False,
disable_numparse=True)` prints through tabulate's "pipe" format, byte for byte: cells stripped, every column
as wide as its widest cell and at least its title plus two, one space of padding, ':' on the aligned side.

Every cell is user text as far as this module knows (a run's `--label`, a domain folder's name), so each format
escapes what would change its structure: a Markdown cell's `|` is written `\\|` (GitHub's escaped pipe), LaTeX's
specials are escaped (`latex_escape`), and in every format a control character (a newline, a tab) is shown as its
escape (`\\n`, `\\t`, `\\x07`): a table row is one line, and no cell can move another one column over.
"""
from __future__ import annotations

import html
import re
import unicodedata
from typing import Any, Literal, Sequence

Align = Literal["left", "right", "center"]

_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}",  # (OT1 prints these three as other glyphs)
}
_CONTROL_NAMES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_control(c: str) -> bool:
    """A character that cannot stand in one line of text: C0/C1 controls and the Unicode line separators."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp")


def one_line(text: str) -> str:
    """`text` with every control character shown as its escape (`\\n`, `\\t`, `\\x07`, `\\u2028`)."""
    if not any(is_control(c) for c in text):
        return text
    return "".join(_CONTROL_NAMES.get(c) or (c.encode("unicode_escape").decode("ascii") if is_control(c) else c)
                   for c in text)


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(c, c) for c in one_line(text))


def _cell(value: Any) -> str:
    """A Markdown cell: one line, its pipes escaped."""
    return shown(value).replace("|", "\\|")


def shown(value: Any) -> str:
    """The text a cell shows: stripped, on one line (`one_line`); what a Markdown cell reads back as."""
    return "" if value is None else one_line(str(value).strip())


def _pad(text: str, width: int, align: Align) -> str:
    if align == "right":
        return text.rjust(width)
    if align == "center":
        left = (width - len(text)) // 2
        return " " * left + text + " " * (width - len(text) - left)
    return text.ljust(width)


def markdown_table(header: Sequence[Any], rows: Sequence[Sequence[Any]], left: int = 1,
                   align: Sequence[Align] | None = None) -> str:
    """A Markdown pipe table: the first `left` columns aligned left, the others right (or `align`, per column)."""
    head = [_cell(h) for h in header]
    body = [[_cell(c) for c in row] for row in rows]
    if any(len(r) != len(head) for r in body):
        raise ValueError(f"every row needs {len(head)} cells, as the header")
    aligns: list[Align] = (list(align) if align is not None
                           else ["left" if i < left else "right" for i in range(len(head))])
    widths = [max([len(h) + 2, *(len(r[i]) for r in body)]) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(_pad(c, w, a) for c, w, a in zip(cells, widths, aligns)) + " |"

    rule = {"left": lambda w: ":" + "-" * (w + 1), "right": lambda w: "-" * (w + 1) + ":",
            "center": lambda w: ":" + "-" * w + ":"}
    sep = "|" + "|".join(rule[a](w) for a, w in zip(aligns, widths)) + "|"
    return "\n".join([line(head), sep, *(line(r) for r in body)])


def latex_table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """A booktabs `tabular`: the first column left, the others centred; the header escaped (`latex_escape`) and
    bold, the cells written as given (already LaTeX)."""
    return "\n".join([
        "\\begin{tabular}{l" + "c" * (len(header) - 1) + "}",
        "\\toprule",
        " & ".join(f"\\textbf{{{latex_escape(str(h))}}}" for h in header) + " \\\\",
        "\\midrule",
        *(" & ".join(map(str, r)) + " \\\\" for r in rows),
        "\\bottomrule",
        "\\end{tabular}",
    ])


def html_table(head: Sequence[str], body: Sequence[Sequence[str]], left: int = 1) -> str:
    """An HTML table of ready HTML cells in a horizontally scrolling box (a wide table never widens the page);
    the first `left` columns (text) left-aligned, the others (numbers) right-aligned."""
    def attr(j: int) -> str:
        return ' class="l"' if j < left else ""

    rows = ["<tr>" + "".join(f"<th{attr(j)}>{c}</th>" for j, c in enumerate(head)) + "</tr>"]
    rows += ["<tr>" + "".join(f"<td{attr(j)}>{c}</td>" for j, c in enumerate(r)) + "</tr>" for r in body]
    return '<div class="scroll"><table>\n' + "\n".join(rows) + "\n</table></div>"


def html_text(text: str) -> str:
    """Plain text as HTML: on one line, `&`, `<`, `>` and both quotes escaped (`html.escape`), so that the text
    is safe in an element or an attribute value alike."""
    return html.escape(one_line(text), quote=True)


def heading(text: str, level: int, latex: bool = False) -> str:
    if latex:
        return "\\" + "sub" * (level - 1) + "section{" + latex_escape(text) + "}"
    return "#" * level + " " + one_line(text)


def slugify(text: str) -> str:
    """An anchor id from heading text: lower case, runs of other characters as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


class Anchors:
    """Unique anchor ids of one page: `<prefix>-<slug of the text>`, then `-2`, `-3`, ... for repeats."""

    def __init__(self, prefix: str | None) -> None:
        self.prefix, self.used = prefix, set[str]()

    def __call__(self, text: str) -> str:
        found, k = f"{self.prefix}-{slugify(text)}", 2
        while found in self.used:
            found, k = f"{self.prefix}-{slugify(text)}-{k}", k + 1
        self.used.add(found)
        return found
