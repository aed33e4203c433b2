"""A small Markdown renderer for the report: headings, pipe tables, fenced code, bullet lists, paragraphs.

It renders what dgmoe writes (`to_markdown` tables, `dgmoe analyze` summaries) and documentation passed with
`dgmoe report --include`. Every table is wrapped in a horizontally scrolling box and code blocks scroll,
so a wide table or a long command line never widens the page.
"""
from __future__ import annotations

import html
import re

from dgmoe.tables import table_cells

_HEADING = re.compile(r"^#{1,6} ")
_BULLET = re.compile(r"^\s*[-*] ")
#: [text](target): a relative path or an http(s) address; any other scheme (`javascript:`) stays text
_LINK = re.compile(r"\[([^\]]+)\]\(((?:https?://|(?![A-Za-z][A-Za-z0-9+.-]*:))[^)\s\"]+)\)")


def inline(text: str) -> str:
    """Escape `text` and render `code`, **bold**, *emphasis* and [links](relative/path)."""
    out = html.escape(text, quote=False)
    out = _LINK.sub(r'<a href="\2">\1</a>', out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"<em>\1</em>", out)


def slugify(text: str) -> str:
    """An anchor id from heading text: lower case, runs of other characters as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def table_html(head: list[str], body: list[list[str]], escape: bool = True, left: int = 1) -> str:
    """A table in a scrolling box; cells are Markdown inline text (`escape`) or ready HTML. The first `left`
    columns (text) are left-aligned, the others (numbers) right-aligned."""
    cell = inline if escape else (lambda c: c)

    def attr(j: int) -> str:
        return ' class="l"' if j < left else ""

    rows = ["<tr>" + "".join(f"<th{attr(j)}>{cell(c)}</th>" for j, c in enumerate(head)) + "</tr>"]
    rows += ["<tr>" + "".join(f"<td{attr(j)}>{cell(c)}</td>" for j, c in enumerate(r)) + "</tr>" for r in body]
    return '<div class="scroll"><table>\n' + "\n".join(rows) + "\n</table></div>"


def markdown_to_html(text: str, heading_offset: int = 0, id_prefix: str | None = None) -> str:
    """Render the Markdown subset dgmoe writes (tables from `to_markdown`, headings, lists, code, text).

    With `id_prefix`, every heading gets an anchor id `<prefix>-<slug of its text>` (made unique)."""
    lines = text.splitlines()
    out: list[str] = []
    used: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1:j])) + "</code></pre>")
            i = j + 1
        elif _HEADING.match(line):
            level = min(6, len(line) - len(line.lstrip("#")) + heading_offset)
            title = line.lstrip("#").strip()
            attr = ""
            if id_prefix is not None:
                anchor, k = f"{id_prefix}-{slugify(title)}", 2
                while anchor in used:
                    anchor, k = f"{id_prefix}-{slugify(title)}-{k}", k + 1
                used.add(anchor)
                attr = f' id="{anchor}"'
            out.append(f"<h{level}{attr}>{inline(title)}</h{level}>")
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|?\s*:?-{2,}", lines[i + 1]):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            out.append(table_html(table_cells(lines[i]), [table_cells(row) for row in lines[i + 2:j]]))
            i = j
        elif _BULLET.match(line):
            items = []
            while i < len(lines) and _BULLET.match(lines[i]):
                item = [lines[i].strip()[2:]]
                i += 1
                while i < len(lines) and lines[i].startswith("  ") and lines[i].strip() \
                        and not _BULLET.match(lines[i]):
                    item.append(lines[i].strip())  # a wrapped list item
                    i += 1
                items.append(f"<li>{inline(' '.join(item))}</li>")
            out.append("<ul>" + "".join(items) + "</ul>")
        elif not line.strip():
            i += 1
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not re.match(r"^(#{1,6} |```|\s*\||\s*[-*] )", lines[i]):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{inline(' '.join(para))}</p>")
    return "\n".join(out)
