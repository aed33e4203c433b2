"""Markdown to HTML for the report: documents passed with `dgmoe report --include`, the Markdown tables a run's
analysis left and a published results page, through markdown-it-py (CommonMark and GitHub's pipe tables; a
maintained parser, not one of dgmoe's own).

Raw HTML in the text is escaped, not passed through, and links keep markdown-it's check (no `javascript:`).
Headings move `heading_offset` levels down and, with `id_prefix`, get unique anchor ids; every table is wrapped
in a horizontally scrolling box (code blocks scroll by the page's style), so a wide table or a long command line
never widens the page. dgmoe's own results tables are not parsed: they render from their `Document`.
"""
from __future__ import annotations

from markdown_it import MarkdownIt

from dgmoe.tables import Anchors

_PARSER = MarkdownIt("commonmark", {"html": False}).enable("table")


def markdown_to_html(text: str, heading_offset: int = 0, id_prefix: str | None = None) -> str:
    """`text` rendered (see the module docstring)."""
    tokens = _PARSER.parse(text)
    anchors = Anchors(id_prefix)
    for i, token in enumerate(tokens):
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1:]) + heading_offset)}"
            if token.type == "heading_open" and id_prefix is not None:
                token.attrSet("id", anchors(tokens[i + 1].content))
    out = _PARSER.renderer.render(tokens, _PARSER.options, {})
    # (raw HTML is escaped, so every "<table>" here is one the parser opened)
    return out.replace("<table>", '<div class="scroll"><table>').replace("</table>", "</table></div>").rstrip("\n")
