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
escape (`\\n`, `\\t`, `\\x07`), as is an invisible format character (`\\u202e`): a table row is one line, no cell
can move another one column over, and no cell reorders what a reader sees.
"""
from __future__ import annotations

import html
import re
import unicodedata
from typing import Any, Iterable, Literal, Sequence

Align = Literal["left", "right", "center"]

_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}",  # (OT1 prints these three as other glyphs)
}
_CONTROL_NAMES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: first characters that make a spreadsheet program (Excel, LibreOffice Calc, Google Sheets) read a CSV cell as a
#: formula, as OWASP's CSV-injection guidance lists them
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: a cell that is a number (a spreadsheet reads it as one, and it can run nothing): "-1.5", "+2", "1e-05"
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def is_control(c: str) -> bool:
    """A character that cannot stand in one line of text: C0/C1 controls and the Unicode line separators."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp")


def is_invisible(c: str) -> bool:
    """A format character (Unicode category Cf): drawn as nothing, yet it changes what a reader sees around it
    (U+202E RIGHT-TO-LEFT OVERRIDE reverses the text after it, U+200B ZERO WIDTH SPACE splits a word unseen)."""
    return unicodedata.category(c) == "Cf"


def unfit_for_a_label(text: str) -> str | None:
    """Why `text` cannot name something in a table (a run's --label), or None: it must be one line of text that
    shows what it holds, so a control character (`is_control`) or a format character (`is_invisible`) is
    refused, named as its escape."""
    for c in text:
        if is_control(c):
            return f"holds the control character {c!r}"
        if is_invisible(c):
            name = unicodedata.name(c, "a format character")
            return f"holds the invisible format character U+{ord(c):04X} ({name}), which changes how the text " \
                   f"around it is shown"
    return None


def one_line(text: str) -> str:
    """`text` with every control character shown as its escape (`\\n`, `\\t`, `\\x07`, `\\u2028`), and every
    invisible format character too (`\\u202e`): a name written before labels refused them still reads as it is."""
    if not any(is_control(c) or is_invisible(c) for c in text):
        return text
    return "".join(_CONTROL_NAMES.get(c) or (c.encode("unicode_escape").decode("ascii")
                                             if is_control(c) or is_invisible(c) else c) for c in text)


def csv_cell(value: Any) -> str:
    """A CSV cell's text: `value` as text (None blank), with a single quote put before text that a spreadsheet
    program would evaluate as a formula (it starts with one of `FORMULA_STARTS`: `=HYPERLINK(...)`, `@SUM(...)`,
    `-2+3`), as OWASP's CSV-injection guidance says; a number (`-1.5`) stays a number."""
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def _csv_field(text: str) -> str:
    """A CSV field as RFC 4180 writes it: in double quotes (a quote doubled) when it holds a comma, a quote or a
    line break (a carriage return included, which the `csv` module leaves bare under a "\\n" line ending)."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\r\n') else text


def csv_text(columns: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """The one CSV renderer: a header line of `columns`, then one line per row, each ending in a newline, every
    cell through `csv_cell` and quoted as RFC 4180 says (`_csv_field`)."""
    lines = [",".join(_csv_field(csv_cell(v)) for v in row) for row in [columns, *rows]]
    return "".join((line or '""') + "\n" for line in lines)  # (a row of one empty cell is not a blank line)


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
