"""`dgmoe report RUNS_DIR`: a static HTML report folder that stays readable and small for a whole sweep, up to
thousands of runs.

Layout (nothing is fetched when a page is opened; no script):

- `index.html`: the overview, written first (a stopped report still leaves it) and rewritten when the run
  pages are done. A table of contents, the results tables of every selection method (`dgmoe.report.tables`),
  the run index (`dgmoe.report.groups`: one row per dataset / algorithm / model / held-out domains, a filter
  bar to pages per dataset, algorithm, model and held-out domain, and per group its runs, paged), the cost
  per algorithm and model, files passed with `include`, and any problem met on the way.
- `groups/<group>-<k>.html`, `by/<facet>-<value>.html`: a group's runs (`PAGE_ROWS` a page) and the filters.
- `runs/<slug>.html`: a run's own page: what it trained, its accuracy per step (domains named, test domains
  marked, the selected step drawn) and every figure and table its analysis left (`dgmoe.report.runs`).
  Written (with its chart) for the best run of each group, the runs passed as `runs` (`--run`), the runs
  with analysis outputs or a note, and unreadable ones; `pages="all"` writes every run's, `"none"` none.
- `figures/`: every figure once, as a PNG of at most 256 colours and `MAX_FIGURE_WIDTH` pixels, referenced
  by the pages (identical files are stored once).

Pages have a fixed width; wide tables and code scroll inside it. Size budget: `size_budget(n)` bytes for
n run pages, 10 MB for 100 (see docs/benchmarks.md for how it was measured).
"""
from __future__ import annotations

import html
import re
import shutil
import warnings
from pathlib import Path
from typing import Callable, Iterable, Literal, Mapping

from dgmoe.atomic import write_text_atomic
from dgmoe.report.groups import Group, group_runs
from dgmoe.report.markdown import markdown_to_html
from dgmoe.report.runs import RunInfo, scan_runs
from dgmoe.report.store import CHART, MAX_FIGURE_BYTES, FigureStore, Layout, layout_of_index, report_layout

__all__ = ["build_report", "index_budget", "markdown_to_html", "report_budget", "report_size", "size_budget"]

#: the size budget: a fixed part plus a share per run page (its page, its accuracy chart), a share per run
#: listed (its rows in the group pages, its share of the filters) and `MAX_FIGURE_BYTES` per figure copied
#: from a run's analysis (which only analysed runs have).
BUDGET_FIXED_BYTES = 500_000
BUDGET_PER_RUN_BYTES = 95_000
BUDGET_PER_LISTED_RUN_BYTES = 2_000
#: the index page alone: what a reader opens first.
INDEX_FIXED_BYTES = 200_000
INDEX_PER_RUN_BYTES = 8_000
MARKER = ".dgmoe-report"  # marks a folder this module wrote, so that a rebuild may clear its runs/ and figures/

CSS = """*{box-sizing:border-box}
body{margin:0;background:#fff;color:#222;font:15px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif}
main{width:1100px;max-width:100%;margin:0 auto;padding:.5em 1.5em 3em}
h1{border-bottom:3px solid #35c;font-size:1.6em}h2{border-bottom:1px solid #dde;margin-top:1.8em}
nav.toc{background:#f6f8fa;border:1px solid #dde;padding:.4em 1.2em;margin:1em 0}nav.toc ol{margin:.2em 0}
nav.crumbs{font-size:.9em;margin:.8em 0}
.scroll{overflow-x:auto;max-width:100%;margin:.5em 0 1.2em}
table{border-collapse:collapse;font-size:.86em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;vertical-align:top}
th{background:#f0f3f7}td:first-child,th:first-child,td.l,th.l{text-align:left}
table.meta th{text-align:left;background:#f6f8fa;font-weight:600}table.meta td{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eee}
figure{margin:1em 0 1.6em}figcaption{font-size:.9em;color:#333;font-weight:600;margin-bottom:.3em}
code,pre{background:#f6f8fa;border-radius:3px}code{padding:.05em .3em;overflow-wrap:anywhere}
pre{padding:.6em;overflow-x:auto}pre code{padding:0;overflow-wrap:normal}
p,li{overflow-wrap:anywhere}.meta{color:#555;font-size:.9em}.problem{color:#a00}
"""


def size_budget(n_runs: int, n_analysis_figures: int = 0, n_listed: int = 0) -> int:
    """Bytes a report with `n_runs` run pages may take: 10 MB at 100, plus at most `MAX_FIGURE_BYTES` for each
    of the `n_analysis_figures` figures copied from the runs' analysis folders, plus
    `BUDGET_PER_LISTED_RUN_BYTES` for each of the `n_listed` runs the group pages list."""
    return (BUDGET_FIXED_BYTES + BUDGET_PER_RUN_BYTES * n_runs + MAX_FIGURE_BYTES * n_analysis_figures
            + BUDGET_PER_LISTED_RUN_BYTES * n_listed)


def index_budget(n_runs: int) -> int:
    """Bytes the index page may take (1 MB at 100 runs; it holds a row per group of runs and no image)."""
    return INDEX_FIXED_BYTES + INDEX_PER_RUN_BYTES * n_runs


def report_budget(index: str | Path) -> int:
    """The size budget of a written report: from its run pages, the analysis figures it copied and the runs it
    lists (which its marker file records)."""
    layout = layout_of_index(Path(index))
    pages = list(layout.runs.glob("*.html")) if layout.runs.is_dir() else []
    figures = list(layout.figures.glob("*.png")) if layout.figures.is_dir() else []
    marker = layout.assets / MARKER
    listed = re.search(r"runs listed: (\d+)", marker.read_text()) if marker.is_file() else None
    return size_budget(len(pages), sum(not f.stem.endswith(CHART) for f in figures), int(listed[1]) if listed else 0)


def report_size(index: str | Path) -> int:
    """Bytes of a report: its index page plus every file under its `runs/` and `figures/` folders."""
    layout = layout_of_index(Path(index))
    files = [layout.index, *(p for d in layout.folders if d.is_dir() for p in d.rglob("*"))]
    return sum(p.stat().st_size for p in files if p.is_file())


def page(title: str, body: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body><main>\n"
            + "\n".join(body) + "\n</main></body></html>\n")


Pages = Literal["selected", "all", "none"]


def pages_for(runs: list[RunInfo], groups: list[Group], pages: Pages, wanted: Iterable[Path],
              noted: Iterable[Path]) -> list[RunInfo]:
    """The runs that get their own page (see the module docstring), in `runs` order."""
    if pages == "all":
        return list(runs)
    keep = {p.resolve() for p in (*wanted, *noted)}
    if pages == "selected":
        keep |= {best.path.resolve() for g in groups if (best := g.best()) is not None}
        keep |= {r.path.resolve() for r in runs if r.problem or r.figures() or r.tables()}
    return [r for r in runs if r.path.resolve() in keep]


def build_report(runs_dir: str | Path, out: str | Path | None = None, selection: str = "all",
                 include: Iterable[str | Path] = (), title: str = "dgmoe report", count_params: bool = True,
                 notes: Mapping[str | Path, str] | None = None, pages: Pages = "selected",
                 runs: Iterable[str | Path] = (), on_index: Callable[[Path], None] | None = None) -> Path:
    """Write the report of every run under `runs_dir` (see the module docstring) and return its index page.

    `notes` maps a run folder to a line shown on its page (e.g. why `--analyze` could not analyse it); `pages`
    and `runs` say which runs get their own page and chart; `on_index(path)` is called once the first index
    is on disk (the report benchmark times it)."""
    from dgmoe.report.pages import aux_pages, index_body, run_body

    root = Path(runs_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"runs directory {root} does not exist or is not a directory")
    wanted = [Path(p) for p in runs]
    for path in wanted:
        if not (path / "results.jsonl").is_file():
            raise FileNotFoundError(f"--run {path} is not a run folder (no results.jsonl)")
    found = scan_runs(root, count_params)
    if not found:
        raise FileNotFoundError(f"no results.jsonl under {root}: nothing to report (train a run first)")
    includes = [Path(p) for p in include]
    for path in includes:
        if not path.is_file():
            raise FileNotFoundError(f"--include file {path} does not exist")
    layout = report_layout(root, out)
    _clear(layout)
    by_path = {Path(k).resolve(): v for k, v in (notes or {}).items()}
    groups = group_runs(found)
    paged = pages_for(found, groups, pages, wanted, by_path)
    has_page = {r.path for r in paged}
    index = index_body(root, found, groups, has_page, layout, selection, includes, title, by_path)
    _write(layout.assets / MARKER, "written by dgmoe report; its runs/, figures/, groups/ and by/ are rebuilt each "
           f"time\nruns listed: {len(found)}\n")
    _write(layout.index, page(title, index.body(done=0)))
    if on_index is not None:
        on_index(layout.index)
    for path, page_title, body in aux_pages(groups, has_page, layout, title):
        _write(path, page(f"{page_title} - {title}", body))
    store = FigureStore(layout.figures)
    for i, run in enumerate(paged):
        neighbours = (paged[i - 1] if i else None, paged[i + 1] if i + 1 < len(paged) else None)
        body = run_body(run, layout, store, neighbours, title, by_path.get(run.path.resolve()))
        _write(layout.run_page(run), page(f"{run.label} - {title}", body))
    _write(layout.index, page(title, index.body(done=len(paged))))  # kept current: every page written
    used, budget = report_size(layout.index), report_budget(layout.index)
    if used > budget:
        warnings.warn(f"the report takes {used / 1e6:.1f} MB, over its budget of {budget / 1e6:.1f} MB for "
                      f"{len(paged)} run pages and {store.copied} analysis figures", stacklevel=2)
    return layout.index


def _write(path: Path, text: str) -> None:
    write_text_atomic(path, text)


def _clear(layout: Layout) -> None:
    """Remove the pages and figures of an earlier report in the same place (only if dgmoe wrote them)."""
    if (layout.assets / MARKER).is_file():
        for folder in layout.folders:
            shutil.rmtree(folder, ignore_errors=True)
