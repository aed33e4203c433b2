"""The run index of a report that scales to sweeps of thousands of runs.

Runs are grouped by what a table row is about, (dataset, algorithm, model, held-out domains), runs that computed
different things apart (`dgmoe.report.identity`): the index holds
one row per group (its runs, finished, seeds, the test accuracy of its best runs) instead of one per run.
Filter pages (`by/<facet>-<value>.html`) list the groups of one dataset, algorithm, model or held-out domain,
reached from a filter bar of plain links (the report runs no script). Each group has its own pages
(`groups/<slug>-<k>.html`), `PAGE_ROWS` runs each, with every run's numbers; a run's own page (accuracy
chart, analysis figures) is written for the group's best run, the runs a user names and analysed runs
(`dgmoe.report.html.build_report`), and linked from these rows.
"""
from __future__ import annotations

import hashlib
import html
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Iterable, Sequence

from dgmoe.document import Cell, Table
from dgmoe.report.identity import distinguishing, run_identity, saved_config
from dgmoe.report.runs import RunInfo
from dgmoe.report.text import count
from dgmoe.tables import slugify

PAGE_ROWS = 100  # runs per group page
FACETS = ("dataset", "algorithm", "model", "held-out domain")
Link = Callable[[Path, Path], str]  # (from page, to page) -> relative URL, not escaped (`Layout.relative`)


def pct(x: float | None) -> str:
    """An accuracy in percent with one decimal (the noise of a held-out accuracy), or "" for none."""
    return "" if x is None else f"{100 * x:.1f}"


def pct_cell(x: float | None, suffix: str = "") -> Cell:
    """`pct` as a table cell that carries its number (blank for none)."""
    return Cell() if x is None else Cell(mean=100 * x, suffix=suffix)


@dataclass
class Group:
    """The runs of one (dataset, algorithm, model, held-out domains)."""

    dataset: str
    algorithm: str
    model: str
    held_out: tuple[str, ...]
    runs: list[RunInfo]

    @property
    def slug(self) -> str:
        """The group's file-name stem: its slugified name, cut at 80 characters with a hash of the whole name
        then, so that groups that differ only past the cut (a long model label) keep pages of their own."""
        name = f"{self.dataset}-{self.algorithm}-{self.model}-{'-'.join(self.held_out)}"
        slug = slugify(name)
        if len(slug) <= 80:
            return slug
        return f"{slug[:73].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"

    @property
    def label(self) -> str:
        return f"{self.algorithm} / {self.model} / test {self.runs[0].test_text()}"

    def facet(self, name: str) -> tuple[str, ...]:
        return {"dataset": (self.dataset,), "algorithm": (self.algorithm,), "model": (self.model,),
                "held-out domain": self.held_out}[name]

    def best_per_trial(self) -> list[RunInfo]:
        """Per trial seed, the run whose selected checkpoint has the best validation accuracy (DomainBed's
        training-domain validation over the hparams draws)."""
        by_trial: dict[str, list[RunInfo]] = defaultdict(list)
        for run in self.runs:
            if run.selected is not None and run.done:
                by_trial[str(run.args.get("trial_seed"))].append(run)
        return [max(members, key=lambda r: r.selected.val_acc)  # type: ignore[union-attr]
                for _, members in sorted(by_trial.items())]

    def best(self) -> RunInfo | None:
        """The run with the best validation accuracy of the group (its page is written by default)."""
        best = self.best_per_trial()
        return max(best, key=lambda r: r.selected.val_acc) if best else None  # type: ignore[union-attr]


def group_runs(runs: Iterable[RunInfo]) -> list[Group]:
    """The readable runs grouped, sorted by dataset, algorithm, model and held-out domains; runs of one model
    that computed different things (other steps, data size or weights) are groups of their own, the model named
    with what differs, as in the results tables (`dgmoe.report.identity`)."""
    by_key: dict[tuple, list[RunInfo]] = defaultdict(list)
    readable = [run for run in runs if not run.problem]
    suffixes = distinguishing([((run.dataset, run.algorithm, run.model),
                                run_identity(run.args, saved_config(str(run.path)))) for run in readable])
    for run, suffix in zip(readable, suffixes):
        by_key[(run.dataset, run.algorithm, (run.model + suffix).strip(), tuple(run.test_domains))].append(run)
    return [Group(dataset, algorithm, model, held_out, members)
            for (dataset, algorithm, model, held_out), members in sorted(by_key.items())]


def facet_values(groups: Sequence[Group]) -> dict[str, dict[str, list[Group]]]:
    """{facet: {value: its groups}} for every facet of `FACETS`."""
    out: dict[str, dict[str, list[Group]]] = {f: defaultdict(list) for f in FACETS}
    for group in groups:
        for name in FACETS:
            for value in group.facet(name):
                out[name][value].append(group)
    return {f: dict(sorted(v.items())) for f, v in out.items()}


def facet_file(name: str, value: str) -> str:
    return f"{slugify(name)}-{slugify(value)[:60]}.html"


def filter_bar(facets: dict[str, dict[str, list[Group]]], by_dir: Path, page: Path, link: Link,
               current: tuple[str, str] | None = None, limit: int = 40) -> str:
    """Plain links to every filter page, by facet (`limit` values shown per facet)."""
    parts = []
    for name, values in facets.items():
        items = []
        for value, members in list(values.items())[:limit]:
            text = f"{html.escape(value)} ({len(members)})"
            items.append(f"<strong>{text}</strong>" if current == (name, value) else
                         f'<a href="{html.escape(link(page, by_dir / facet_file(name, value)))}">{text}</a>')
        more = f" &hellip; {len(values) - limit} more" if len(values) > limit else ""
        parts.append(f"<li>{html.escape(name)}: " + " &middot; ".join(items) + more + "</li>")
    return '<nav class="toc" aria-label="Filters"><strong>Filter the run groups</strong><ul>' + "".join(parts) \
        + "</ul></nav>"


def groups_table(groups: Sequence[Group], page: Path, group_page: Callable[[Group, int], Path], link: Link,
                 with_dataset: bool = False) -> Table:
    """One row per group: its runs, the seeds, and the test accuracy of its best runs, linked to its pages."""
    head = [*(["dataset"] if with_dataset else []), "algorithm", "model", "held-out domain(s)", "runs", "finished",
            "trial seeds (which)", "hparams draws", "test (%), best run per trial, mean", "best validation (%)"]
    rows = []
    for g in groups:
        best = g.best_per_trial()
        trials = sorted({str(r.args.get("trial_seed")) for r in g.runs})
        hps = {str(r.args.get("hparams_seed")) for r in g.runs}
        tests = [r.selected.test_acc for r in best if r.selected is not None]
        mean_test = sum(tests) / len(tests) if tests else None
        top = g.best()
        runs = Cell(mean=len(g.runs), decimals=0, links=((str(len(g.runs)), link(page, group_page(g, 1))),))
        rows.append([*([g.dataset] if with_dataset else []), g.algorithm, g.model, ", ".join(g.held_out) or "none",
                     runs, sum(r.done for r in g.runs), f"{'seed' if len(trials) == 1 else 'seeds'} {_short(trials)}",
                     len(hps), pct_cell(mean_test), pct_cell(None if top is None or top.selected is None
                                                             else top.selected.val_acc)])
    return Table.make("", head, rows, left=4 if with_dataset else 3)


def _short(values: list[str], limit: int = 6) -> str:
    return ", ".join(values[:limit]) + (f", ... ({len(values)})" if len(values) > limit else "")


def run_rows_table(runs: Sequence[RunInfo], page: Path, run_page: Callable[[RunInfo], Path], link: Link,
                   has_page: Collection[Path]) -> Table:
    """One row per run: its numbers, and a link to its page where one was written."""
    head = ["run", "seeds: trial / hp", "steps", "status", "selected step", "val (%)", "test (%)", "figures"]
    rows = []
    for run in runs:
        sel = run.selected
        test = pct_cell(None if sel is None else sel.test_acc,
                        f" (worst {pct(sel.worst_test_acc)})" if sel is not None and len(run.test_envs) > 1 else "")
        name = Cell(run.rel, links=((run.rel, link(page, run_page(run))),) if run.path in has_page else ())
        rows.append([name, run.seed_pair, "" if run.last_step is None else run.last_step,
                     "problem" if run.problem else ("finished" if run.done else "unfinished"),
                     "" if sel is None else sel.step, pct_cell(None if sel is None else sel.val_acc), test,
                     len(run.figures())])
    return Table.make("", head, rows, left=4)


def group_pages(group: Group, group_page: Callable[[Group, int], Path], run_page: Callable[[RunInfo], Path],
                link: Link, has_page: Collection[Path],
                crumbs: Callable[[Path], str]) -> list[tuple[Path, str, list[str]]]:
    """(file, title, body) of each page of a group's runs, `PAGE_ROWS` runs a page, best validation first."""
    order = sorted(group.runs, key=lambda r: -(r.selected.val_acc if r.selected else -1.0))
    n_pages = max(1, -(-len(order) // PAGE_ROWS))
    out = []
    for k in range(1, n_pages + 1):
        path = group_page(group, k)
        nav = [f'<a href="{html.escape(link(path, group_page(group, j)))}">{j}</a>' if j != k
               else f"<strong>{j}</strong>" for j in range(1, n_pages + 1)]
        body = [crumbs(path), f"<h1>{html.escape(group.dataset)}: {html.escape(group.label)}</h1>",
                f'<p class="meta">{count(len(group.runs), "run")}, best validation first; page {k} of {n_pages}'
                + (": " + " ".join(nav) if n_pages > 1 else "") + ". A linked run has its own page (accuracy "
                "per step, figures); for any other, <code>dgmoe report RUNS_DIR --run RUN</code> writes it.</p>",
                run_rows_table(order[(k - 1) * PAGE_ROWS:k * PAGE_ROWS], path, run_page, link, has_page).html()]
        out.append((path, f"{group.dataset}: {group.label}", body))
    return out
