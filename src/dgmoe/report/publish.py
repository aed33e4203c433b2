"""A results page to publish (`dgmoe results RUNS_DIR --page`): one Markdown file and the same page as HTML,
with the protocol lines, every results table, the runs each cell selected (hparams draw, hparams, step and the
per-seed test accuracy) and links to each selected run's log and config, relative to the page, so that the
folder can be copied or served as it is. A recipe's page starts with the paper-versus-obtained comparison.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pandas as pd

from dgmoe.document import Block, Cell, Document, Heading, Preamble, Table, Text
from dgmoe.engine.io import write_text_atomic
from dgmoe.report.html import page
from dgmoe.report.results import results_document
from dgmoe.report.selected import RUN_COLUMN

PAGE_NAME = "index"


def _links(run_dir: str, out: Path) -> Cell:
    """A run folder as links to its log and config, relative to the page."""
    run = Path(run_dir)
    log = run / "train.log" if (run / "train.log").exists() else run / "results.jsonl"
    rel = Path(os.path.relpath(run, out)).as_posix()
    return Cell(run_dir, links=(("log", f"{rel}/{log.name}"), ("config", f"{rel}/config.json")))


def linked(block: Block, out: Path) -> Block:
    """`block` with every run folder of a selected-runs table shown as links to its log and config."""
    if not isinstance(block, Table) or RUN_COLUMN not in block.columns:
        return block
    k = block.columns.index(RUN_COLUMN)
    return replace(block, rows=tuple((*r[:k], _links(r[k].text, out), *r[k + 1:]) for r in block.rows))


def _untitled(document: Document) -> list[Block]:
    """The blocks under a document's title (the page has its own)."""
    return [Text(" ".join(b.lines)) if isinstance(b, Preamble) else b for b in document.blocks
            if not (isinstance(b, Heading) and b.level == 1)]


def results_page(records: pd.DataFrame, out: Path, title: str, selection: str = "all",
                 intro: Document | None = None) -> tuple[Path, Path]:
    """Write out/index.md and out/index.html (see the module docstring), both from one `Document`; returns
    their paths."""
    blocks = [Heading(title, 1), *(_untitled(intro) if intro else []),
              *_untitled(results_document(records, selection, hparams=True))]
    document = Document(tuple(linked(b, out) for b in blocks))
    out.mkdir(parents=True, exist_ok=True)
    md, html = out / f"{PAGE_NAME}.md", out / f"{PAGE_NAME}.html"
    write_text_atomic(md, document.markdown())
    write_text_atomic(html, page(title, [document.html()]))
    return md, html
