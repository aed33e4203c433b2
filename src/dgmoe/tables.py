"""The one table renderer: a Markdown pipe table or a booktabs `tabular`, from a header and rows of strings.

It sits at the bottom of the package (no imports of dgmoe, numpy or pandas) so that every package that prints
a table (results tables in `dgmoe.report`, analysis summaries, benchmark and sweep estimates, experiment
reports) renders it the same way. The Markdown form is what pandas' `to_markdown(index=False,
disable_numparse=True)` prints through tabulate's "pipe" format, byte for byte: cells stripped, every column
as wide as its widest cell and at least its title plus two, one space of padding, ':' on the aligned side.
"""
from __future__ import annotations

from typing import Any, Literal, Sequence

Align = Literal["left", "right", "center"]

_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(c, c) for c in text)


def _cell(value: Any) -> str:
    return "" if value is None else str(value).strip()


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
    return "#" * level + " " + text


def table_block(title: str, header: Sequence[Any], rows: Sequence[Sequence[Any]], latex: bool = False) -> str:
    """A level-3 heading and its table (a LaTeX table centred)."""
    body = render_table(header, rows, latex)
    if latex:
        body = "\\begin{center}\n" + body + "\n\\end{center}"
    return heading(title, 3, latex) + "\n\n" + body
