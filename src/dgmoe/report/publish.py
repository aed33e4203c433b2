"""A results page to publish (`dgmoe results RUNS_DIR --page`): one Markdown file and the same page as HTML,
with the protocol lines, every results table, the runs each cell selected (hparams draw, hparams, step and the
per-seed test accuracy) and links to each selected run's log and config, relative to the page, so that the
folder can be copied or served as it is. A recipe's page starts with the paper-versus-obtained comparison.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from dgmoe.engine.io import write_text_atomic
from dgmoe.report.html import page
from dgmoe.report.markdown import markdown_to_html
from dgmoe.report.results import results_tables

PAGE_NAME = "index"


def _link(run_dir: str, out: Path) -> str:
    run = Path(run_dir)
    log = run / "train.log" if (run / "train.log").exists() else run / "results.jsonl"
    rel = Path(os.path.relpath(run, out)).as_posix()
    return f"[log]({rel}/{log.name}), [config]({rel}/config.json)"


def linked(text: str, records: pd.DataFrame, out: Path) -> str:
    """`text` with every run folder named in a table cell replaced by links to its log and config."""
    for run_dir in sorted(set(records["run_dir"]), key=len, reverse=True):
        text = text.replace(f" {run_dir} |", f" {_link(run_dir, out)} |")
    return text


def results_page(records: pd.DataFrame, out: Path, title: str, selection: str = "all",
                 intro: str | None = None) -> tuple[Path, Path]:
    """Write out/index.md and out/index.html (see the module docstring); returns their paths."""
    tables = results_tables(records, selection, hparams=True)
    body = tables.split("\n", 1)[1] if tables.startswith("# ") else tables  # (the page has its own title)
    parts = [f"# {title}", ""]
    if intro:
        parts += [intro.split("\n", 1)[1] if intro.startswith("# ") else intro, ""]
    text = linked("\n".join(parts) + body, records, out)
    out.mkdir(parents=True, exist_ok=True)
    md, html = out / f"{PAGE_NAME}.md", out / f"{PAGE_NAME}.html"
    write_text_atomic(md, text)
    write_text_atomic(html, page(title, [markdown_to_html(text)]))
    return md, html
