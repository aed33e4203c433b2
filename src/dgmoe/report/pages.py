"""The pages of the HTML report: the overview (`index_body`), the group and filter pages (`aux_pages`, see
`dgmoe.report.groups`) and a run's own page (`run_body`).

`dgmoe.report.html.build_report` writes them; this module only turns `RunInfo`s and records into HTML.
Every run is named by `RunInfo.label` (algorithm / model / test domains), every user-given string is escaped,
numbers are rounded to their noise (`dgmoe.report.text`) and no value is printed as a Python repr.
"""
from __future__ import annotations

import html
import json
import statistics
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from dgmoe.document import Cell, Table
from dgmoe.report.groups import (
    Group,
    facet_file,
    facet_values,
    filter_bar,
    group_pages,
    groups_table,
    pct,
)
from dgmoe.report.markdown import markdown_to_html
from dgmoe.report.runs import RunInfo, figure_title
from dgmoe.report.store import CHART, FigureStore, Layout
from dgmoe.report.text import count, rounded, rounded_cell
from dgmoe.tables import slugify

Section = tuple[str, str, str, list[tuple[str, str]]]  # (anchor, heading, HTML, [(anchor, heading) of parts])


def figure_html(page_path: Path, file: Path, size: tuple[int, int] | None, caption: str, alt: str) -> str:
    """A stored figure with its heading (`caption`, none if empty), loaded lazily, its size reserved."""
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    head = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return (f'<figure>{head}<img loading="lazy" src="{Layout.link(page_path, file)}" alt="{html.escape(alt)}"'
            f"{dims}></figure>")


def plain(value: Any) -> str:
    """A setting's value as a person writes it: JSON for objects and lists, `g` for floats, never a repr."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def spread(values: Sequence[float]) -> float:
    """The noise of a mean of `values`: their standard deviation (0 for fewer than two)."""
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def status(run: RunInfo) -> str:
    """finished, unfinished (no done file) or problem (records unreadable)."""
    return "problem" if run.problem else ("finished" if run.done else "unfinished")


def results_section(records, selection: str, multi: list[RunInfo]) -> tuple[str, list[tuple[str, str]]]:
    """The results tables as HTML with anchored headings, and (id, text) of each selection method's heading.

    Only datasets with single-test-domain runs have DomainBed tables, those with WILDS metrics WILDS tables and
    the distribution-shift suites their shift table; `multi` are the runs of the others."""
    from dgmoe.report.results import left_out, results_document
    from dgmoe.report.shifts import shift_datasets
    from dgmoe.report.wilds import wilds_datasets

    if records is not None and len(records):
        single = (set(records.loc[records["test_envs"].map(len) == 1, "dataset"]) | set(wilds_datasets(records))
                  | set(shift_datasets(records)))
        left = left_out(records, [*wilds_datasets(records), *shift_datasets(records)])
        records = records[records["dataset"].isin(single)]
        if not len(records):
            return "".join(f'<p class="problem">No results table. {html.escape(n)}</p>' for n in left), []
    if records is None or not len(records):
        return "<p>No finished run yet: no results table (unfinished runs are in the run index).</p>", []
    try:
        document = results_document(records, selection)
    except ValueError as err:
        return f'<p class="problem">The results tables could not be computed: {html.escape(str(err))}</p>', []
    body = document.html(heading_offset=1, id_prefix="results", title=False)  # (the section has its own heading)
    if multi:
        names = ", ".join(sorted({r.dataset for r in multi}))
        body += (f"<p class=\"meta\">{count(len(multi), 'run')} of {html.escape(names)} hold out several test domains "
                 "at once and are not in these DomainBed tables (they need one test domain per run): see the run "
                 "index.</p>")
    return body, document.headings(2, id_prefix="results", title=False)  # (shown one level down, as <h3>)


def include_section(path: Path) -> tuple[str, str, str]:
    """(anchor, heading, HTML) of a Markdown file passed with --include."""
    anchor = f"include-{slugify(path.stem)}"
    return anchor, f"Included: {path.name}", markdown_to_html(path.read_text(encoding="utf-8"), heading_offset=2)


def cost_table(runs: Sequence[RunInfo]) -> Table:
    """Per dataset, algorithm and model: runs, parameters, mean train step time and peak memory (GMoE Table 16)."""
    groups: dict[tuple[str, str, str], list[RunInfo]] = defaultdict(list)
    for run in runs:
        if not run.problem:
            groups[(run.dataset, run.algorithm, run.model)].append(run)
    head = ["dataset", "algorithm", "model", "runs", "params (M)", "step time (s), mean", "step time, range over runs",
            "peak memory (GB)", "steps"]
    rows = []
    for (dataset, algorithm, model), members in sorted(groups.items()):
        times = [t for t in (r.mean_of("step_time") for r in members) if t is not None]
        mems = [m for m in (r.max_of("mem_gb") for r in members) if m is not None]
        params = {r.params for r in members if r.params is not None}
        steps = sorted({r.last_step for r in members if r.last_step is not None})
        noise = spread(times) or (min(r.spread_of("step_time") or 0.0 for r in members) if times else 0.0)
        rows.append([dataset, algorithm, model, len(members),
                     Cell(mean=params.pop() / 1e6, decimals=2) if len(params) == 1 else "",
                     rounded_cell(sum(times) / len(times) if times else None, noise or None),
                     f"{rounded(min(times), noise or None)}-{rounded(max(times), noise or None)}"
                     if len(times) > 1 else "",
                     rounded_cell(max(mems) if mems else None, decimals=2),
                     ", ".join(str(s) for s in steps[:3]) + (", ..." if len(steps) > 3 else "")])
    return Table.make("", head, rows, left=3)


def _toc(sections: Sequence[Section]) -> str:
    items = []
    for anchor, heading, _, parts in sections:
        sub = "".join(f'<li><a href="#{a}">{html.escape(t)}</a></li>' for a, t in parts)
        items.append(f'<li><a href="#{anchor}">{html.escape(heading)}</a>' + (f"<ol>{sub}</ol>" if sub else "")
                     + "</li>")
    return '<nav class="toc" aria-label="Contents"><strong>Contents</strong><ol>' + "".join(items) + "</ol></nav>"


def _load_records(root: Path):
    """(records, problem or None, notes): the records of the results tables; duplicates are a note."""
    from dgmoe.report.collect import DuplicateRunsWarning, RecordError, load_records

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # unfinished and broken runs are listed in the report itself
            records = load_records(root, skip_broken=True)
        return records, None, [str(w.message) for w in caught if issubclass(w.category, DuplicateRunsWarning)]
    except (RecordError, ValueError) as err:
        return None, str(err), []


@dataclass
class IndexPage:
    """The overview, computed once; `body(done)` says how many of its run pages are written so far."""

    title: str
    root: Path
    runs: Sequence[RunInfo]
    n_pages: int
    n_datasets: int
    sections: list[Section]

    def body(self, done: int) -> list[str]:
        finished = sum(r.done for r in self.runs)
        state = (f"{count(self.n_pages, 'run page')} written" if done >= self.n_pages else
                 f"run pages being written ({done} of {self.n_pages}); this page is rewritten when they are done")
        out = [f"<h1>{html.escape(self.title)}</h1>",
               f'<p class="meta">Runs directory <code>{html.escape(str(self.root))}</code>: '
               f"{count(len(self.runs), 'run')}, {finished} finished, over {count(self.n_datasets, 'dataset')}; "
               f"{state}.</p>", _toc(self.sections)]
        return out + [f'<section><h2 id="{a}">{html.escape(h)}</h2>\n{content}</section>'
                      for a, h, content, _ in self.sections]


RUN_INDEX_NOTE = ("One row per group of runs: dataset, algorithm, model and held-out domains. Follow a group's run "
                  "count to its runs (paged, best validation first), or a filter to the groups of one dataset, "
                  "algorithm, model or held-out domain. Test: per trial seed, the run whose selected checkpoint (the "
                  "best mean out-split accuracy of the training domains) validates best, then the mean over trial "
                  "seeds. Own pages (accuracy per step, figures) are written for {pages}: each group's best run, "
                  "analysed runs and those named with <code>--run</code>; <code>--pages all</code> writes every "
                  "run's.")


def run_index(groups: Sequence[Group], has_page: Collection[Path], layout: Layout) -> tuple[str, list]:
    """The run index section: the filter bar, then a table of groups per dataset."""
    facets = facet_values(groups)
    blocks = [f'<p class="meta">{RUN_INDEX_NOTE.format(pages=count(len(has_page), "run"))}</p>',
              filter_bar(facets, layout.by, layout.index, Layout.relative)]
    parts = []
    for dataset, members in facets["dataset"].items():
        anchor = f"runs-{slugify(dataset)}"
        n_runs = sum(len(g.runs) for g in members)
        parts.append((anchor, f"{dataset} ({n_runs})"))
        domains = ", ".join(members[0].runs[0].domains)
        blocks.append(f'<h3 id="{anchor}">{html.escape(dataset)}</h3><p class="meta">{count(n_runs, "run")} in '
                      f"{count(len(members), 'group')}; domains: {html.escape(domains)}</p>"
                      + groups_table(members, layout.index, layout.group_page, Layout.relative).html())
    return "\n".join(blocks), parts


def _crumbs(layout: Layout, title: str):
    def crumbs(path: Path) -> str:
        index = Layout.link(path, layout.index)
        return (f'<nav class="crumbs"><a href="{index}">{html.escape(title)}</a> &middot; '
                f'<a href="{index}#runs">run index</a></nav>')
    return crumbs


def aux_pages(groups: Sequence[Group], has_page: Collection[Path], layout: Layout,
              title: str) -> list[tuple[Path, str, list[str]]]:
    """(file, title, body) of every group page and every filter page."""
    crumbs = _crumbs(layout, title)
    out = [p for g in groups for p in group_pages(g, layout.group_page, layout.run_page, Layout.relative, has_page,
                                                  crumbs)]
    facets = facet_values(groups)
    for name, values in facets.items():
        for value, members in values.items():
            path = layout.by / facet_file(name, value)
            n_runs = sum(len(g.runs) for g in members)
            out.append((path, f"{name}: {value}", [
                crumbs(path), f"<h1>Runs with {html.escape(name)} {html.escape(value)}</h1>",
                f'<p class="meta">{count(n_runs, "run")} in {count(len(members), "group")}.</p>',
                filter_bar(facets, layout.by, path, Layout.relative, current=(name, value)),
                groups_table(members, path, layout.group_page, Layout.relative, with_dataset=True).html()]))
    return out


def index_body(root: Path, runs: Sequence[RunInfo], groups: Sequence[Group], has_page: Collection[Path],
               layout: Layout, selection: str, includes: Sequence[Path], title: str,
               notes: Mapping[Path, str]) -> IndexPage:
    """The overview page: contents, results tables, run index, cost, included files, problems."""
    records, problem, duplicates = _load_records(root)
    ok = [r for r in runs if not r.problem]
    single = {r.dataset for r in ok if len(r.test_envs) == 1}
    if records is not None and len(records):
        from dgmoe.report.shifts import shift_datasets
        from dgmoe.report.wilds import wilds_datasets

        single |= set(wilds_datasets(records)) | set(shift_datasets(records))  # in the WILDS and shift tables
    multi = [r for r in ok if r.dataset not in single]
    results, parts = results_section(records, selection, multi)
    if problem:
        results = f'<p class="problem">Records could not be read: {html.escape(problem)}</p>' + results
    results = "".join(f'<p class="meta">Note: {html.escape(d)}.</p>' for d in duplicates) + results
    sections: list[Section] = [("results", "Results", results, parts)]
    sections.append(("runs", "Run index", *run_index(groups, has_page, layout)))
    sections.append(("cost", "Cost", '<p class="meta">From the records: mean wall time of a training step and '
                     "peak memory per run, then over the runs of each row (as GMoE Table 16), rounded to their "
                     "spread.</p>" + cost_table(runs).html(), []))
    sections += [(a, h, body, []) for a, h, body in map(include_section, includes)]

    def name(r: RunInfo, text: str) -> str:
        shown = html.escape(text)
        return f'<a href="{Layout.link(layout.index, layout.run_page(r))}">{shown}</a>' if r.path in has_page \
            else shown

    trouble = [f"<li>{name(r, r.rel)}: {html.escape(r.problem or '')}</li>" for r in runs if r.problem]
    trouble += [f"<li>{name(r, r.label)}: {html.escape(notes[r.path.resolve()])}</li>" for r in runs
                if r.path.resolve() in notes]
    if trouble:
        sections.append(("problems", "Problems", "<ul>" + "".join(trouble) + "</ul>", []))
    return IndexPage(title, root, runs, len(has_page), len({r.dataset for r in ok}), sections)


def _flat(records: Sequence[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not isinstance(v, (dict, list))} for r in records]


def _meta_rows(run: RunInfo) -> list[tuple[str, str]]:
    sel = run.selected
    train = [d for i, d in enumerate(run.domains) if i not in run.test_envs]
    hp = run.records[-1].get("hparams") if run.records else None
    rows = [("run folder", f"<code>{html.escape(run.rel)}</code>"), ("dataset", html.escape(run.dataset)),
            ("algorithm", html.escape(run.algorithm)),
            ("model", html.escape(run.model) + ("" if run.params is None else f" ({run.params / 1e6:.2f}M params)")),
            ("test domain(s)", html.escape(", ".join(run.test_domains) or "none")),
            ("training domains", html.escape(", ".join(train))), ("seeds", html.escape(run.seeds)),
            ("status", f"{status(run)}, {count(len(run.records), 'checkpoint')}, last step {run.last_step}")]
    if sel is not None:
        worst = f", worst test domain {pct(sel.worst_test_acc)}%" if len(run.test_envs) > 1 else ""
        rows.append(("selected checkpoint", (f"step {sel.step}: validation {pct(sel.val_acc)}%, test "
                                             f"{pct(sel.test_acc)}%{worst} (best mean out-split accuracy of the "
                                             "training domains)")))
    rows.append(("cost", f"step time {rounded(run.mean_of('step_time'), run.spread_of('step_time'))} s (mean), "
                         f"peak memory {rounded(run.max_of('mem_gb'), decimals=2)} GB"))
    if isinstance(hp, dict):
        rows.append(("hyperparameters", html.escape(", ".join(f"{k}={plain(v)}" for k, v in sorted(hp.items())))))
    return rows


def _accuracy_figure(run: RunInfo, page_path: Path, store: FigureStore) -> str:
    from dgmoe.analysis import plots

    try:
        sel = run.selected
        fig = plots.plot_accuracy_curves(_flat(run.records), f"Accuracy per step: {run.label} ({run.seeds})",
                                         run.domains, run.test_envs, None if sel is None else sel.step)
        path, size = store.add(plots.png_bytes(fig, dpi=90), f"{run.slug}_{CHART}")
    except Exception as err:  # a record the chart cannot read must not stop the report
        return f'<p class="problem">The accuracy chart could not be drawn: {html.escape(str(err))}</p>'
    return figure_html(page_path, path, size, "", f"accuracy per step of {run.label}")


def run_body(run: RunInfo, layout: Layout, store: FigureStore, neighbours: tuple[RunInfo | None, RunInfo | None],
             title: str, note: str | None) -> list[str]:
    """One run's page: what it is, its accuracy per step, its analysis figures and tables."""
    page_path = layout.run_page(run)
    index = Layout.link(page_path, layout.index)
    crumbs = [f'<a href="{index}">{html.escape(title)}</a>', f'<a href="{index}#runs">run index</a>']
    for word, other in zip(("previous", "next"), neighbours):
        if other is not None:
            crumbs.append(f'{word}: <a href="{Layout.link(page_path, layout.run_page(other))}">'
                          f"{html.escape(other.label)}</a>")
    body = ['<nav class="crumbs">' + " &middot; ".join(crumbs) + "</nav>",
            f"<h1>{html.escape(run.label if not run.problem else run.rel)}</h1>"]
    if run.problem:
        body.append(f'<p class="problem">This run could not be read: {html.escape(run.problem)}</p>')
        return body
    body.append('<div class="scroll"><table class="meta">' + "".join(
        f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in _meta_rows(run)) + "</table></div>")
    body += ['<h2 id="accuracy">Accuracy per step</h2>', _accuracy_figure(run, page_path, store),
             '<h2 id="analysis">Analysis</h2>']
    if note:
        body.append(f'<p class="problem">{html.escape(note)}</p>')
    tables, figures = run.tables(), run.figures()
    if not tables and not figures:
        body.append(f'<p class="meta">No analysis yet: run <code>dgmoe analyze routing {html.escape(run.rel)}</code> '
                    "(or <code>dgmoe report --analyze</code>) to add routing maps, expert usage and attention "
                    "maps.</p>")
    body += [markdown_to_html(p.read_text(encoding="utf-8", errors="replace"), heading_offset=0) for p in tables]
    for path in figures:
        caption = figure_title(path, run.path.name)
        stored, size = store.add(path.read_bytes(), f"{run.slug}_{path.stem}", copied=True)
        body.append(figure_html(page_path, stored, size, caption, f"{caption}: {run.label}"))
    return body
