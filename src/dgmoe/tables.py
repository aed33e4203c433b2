"""The one table renderer: a Markdown pipe table or a booktabs `tabular`, from a header and rows of strings.

It sits at the bottom of the package (no imports of dgmoe, numpy or pandas) so that every package that prints
a table (results tables in `dgmoe.report`, analysis summaries, benchmark and sweep estimates, experiment
reports) renders it the same way. The Markdown form is what pandas' `to_markdown(index=False,
disable_numparse=True)` prints through tabulate's "pipe" format, byte for byte: cells stripped, every column
as wide as its widest cell and at least its title plus two, one space of padding, ':' on the aligned side.

Every cell is user text as far as this module knows (a run's `--label`, a domain folder's name), so each format
escapes what would change its structure: a Markdown cell's `|` is written `\\|` (GitHub's escaped pipe, which
`table_cells` reads back), LaTeX's specials are escaped (`latex_escape`), and in every format a control character
(a newline, a tab) is shown as its escape (`\\n`, `\\t`, `\\x07`): a table row is one line, and no cell can move
another one column over.
"""
from __future__ import annotations

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
    return "" if value is None else one_line(str(value).strip()).replace("|", "\\|")


def table_cells(line: str) -> list[str]:
    """The cells of one row of a Markdown pipe table, as the text they show (an escaped `\\|` read back as `|`):
    the inverse of `markdown_table`'s rows."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


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


def render_table(header: Sequence[Any], rows: Sequence[Sequence[Any]], latex: bool = False, left: int = 1) -> str:
    """A Markdown pipe table (`markdown_table`), or a booktabs `tabular`; labels are escaped for LaTeX."""
    if not latex:
        return markdown_table(header, rows, left)
    lines = [
        "\\begin{tabular}{l" + "c" * (len(header) - 1) + "}",
        "\\toprule",
        " & ".join(f"\\textbf{{{latex_escape(str(h))}}}" for h in header) + " \\\\",
        "\\midrule",
        *(" & ".join([latex_escape(str(r[0])), *map(str, r[1:])]) + " \\\\" for r in rows),
        "\\bottomrule",
        "\\end{tabular}",
    ]
    return "\n".join(lines)


def heading(text: str, level: int, latex: bool = False) -> str:
    if latex:
        return "\\" + "sub" * (level - 1) + "section{" + latex_escape(text) + "}"
    return "#" * level + " " + one_line(text)


def table_block(title: str, header: Sequence[Any], rows: Sequence[Sequence[Any]], latex: bool = False) -> str:
    """A level-3 heading and its table (a LaTeX table centred)."""
    body = render_table(header, rows, latex)
    if latex:
        body = "\\begin{center}\n" + body + "\n\\end{center}"
    return heading(title, 3, latex) + "\n\n" + body
