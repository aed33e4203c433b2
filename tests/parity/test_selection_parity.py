"""`dgmoe results` against DomainBed's `collect_results.py`, cell by cell, on a sweep full of ties.

The sweep comes from `tie_sweep.py` (deterministic); the cells DomainBed printed for it, in plain text and
with `--latex`, are in `fixtures/domainbed_collect_results.json`, written by
`record_domainbed_selection.py` (see its docstring to regenerate). Every cell of every table (per dataset
and Averages, for all three selection methods) must read the same in dgmoe.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from record_domainbed_selection import parse_latex
from tie_sweep import sweep_digest, write_sweep

from dgmoe.cli.results import command
from dgmoe.report.collect import load_records
from dgmoe.report.results import results_tables

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "domainbed_collect_results.json").read_text())


def parse_markdown(text: str) -> dict[str, dict[str, dict]]:
    """{method name: {table: {"columns": [...], "rows": {label: [cells]}}}} from dgmoe's Markdown."""
    tables: dict[str, dict[str, dict]] = {}
    method = name = None
    for line in text.splitlines():
        if m := re.match(r"^## Model selection: (.+)$", line):
            method = m.group(1)
        elif m := re.match(r"^### (.+)$", line):
            name = m.group(1)
        elif line.startswith("|") and not line.startswith("|:"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            table = tables.setdefault(method, {}).setdefault(name, {"columns": [], "rows": {}})
            if not table["columns"]:
                table["columns"] = cells[1:]
            else:
                table["rows"][cells[0]] = cells[1:]
    return tables


def domainbed_view(ours: dict) -> dict:
    """dgmoe's tables as DomainBed labels them: rows by algorithm alone (dgmoe's rows also name the model),
    cells without dgmoe's partial-average markers ("(1/4)", "(partial)"); the numbers are left as printed."""
    def cell(text: str) -> str:
        return re.sub(r" \((\d+/\d+|partial)\)$", "", text)

    return {method: {name: {"columns": table["columns"],
                            "rows": {label.split(" / ")[0]: [cell(c) for c in cells]
                                     for label, cells in table["rows"].items()}}
                     for name, table in tables.items()} for method, tables in ours.items()}


def mismatches(ours: dict, theirs: dict) -> tuple[list[str], int]:
    """Every cell DomainBed printed that dgmoe prints differently (or not at all), and the cells compared."""
    ours = domainbed_view(ours)
    out, compared = [], 0
    if set(ours) != set(theirs):
        out.append(f"methods: dgmoe {sorted(ours)} vs DomainBed {sorted(theirs)}")
    for method, tables in theirs.items():
        if set(ours.get(method, {})) != set(tables):
            out.append(f"{method}: tables {sorted(ours.get(method, {}))} vs {sorted(tables)}")
        for name, table in tables.items():
            mine = ours.get(method, {}).get(name, {"columns": [], "rows": {}})
            if sorted(mine["columns"]) != sorted(table["columns"]) or set(mine["rows"]) != set(table["rows"]):
                out.append(f"{method} / {name}: layout {mine['columns']} {sorted(mine['rows'])} vs "
                           f"{table['columns']} {sorted(table['rows'])}")
                continue
            for label, cells in table["rows"].items():
                got = dict(zip(mine["columns"], mine["rows"][label]))
                for column, cell in zip(table["columns"], cells):
                    compared += 1
                    if got[column] != cell:
                        out.append(f"{method} / {name} / {label} / {column}: dgmoe {got[column]!r}, "
                                   f"DomainBed {cell!r}")
    return out, compared


@pytest.fixture(scope="module")
def sweep_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tie_sweep")
    write_sweep(root)
    return root


@pytest.fixture(scope="module")
def records(sweep_root):
    return load_records(sweep_root)


def test_sweep_is_the_one_domainbed_read(sweep_root, records):
    assert FIXTURE["peer"] == "DomainBed" and FIXTURE["peer_commit"] == "b93c22a"
    assert sweep_digest(sweep_root) == FIXTURE["sweep"]["sha256"], "tie_sweep.py changed: rerun the recorder"
    assert len(records) == FIXTURE["total_records"] == FIXTURE["sweep"]["records"]
    assert records["run_dir"].nunique() == FIXTURE["sweep"]["run_dirs"]


@pytest.mark.parametrize("fmt", ["text", "latex"])
def test_every_cell_matches_domainbed(records, fmt):
    text = results_tables(records, "all", latex=fmt == "latex")
    ours = parse_latex(text) if fmt == "latex" else parse_markdown(text)
    bad, compared = mismatches(ours, FIXTURE["tables"][fmt])
    assert not bad, f"{len(bad)} of {compared} cells differ from DomainBed:\n" + "\n".join(bad)
    assert compared == FIXTURE["cells"] // 2 == 78  # 3 methods x (2 x 2 x 5 per dataset + 2 x 3 Averages)
    assert f"{FIXTURE['total_records']} records from {FIXTURE['sweep']['run_dirs']} runs." in text


def test_cli_prints_the_compared_tables(sweep_root, records):
    result = CliRunner().invoke(command, [str(sweep_root), "--no-save"])
    assert result.exit_code == 0, result.output
    assert result.output == results_tables(records, "all")
