"""Record what DomainBed's `collect_results.py` prints for the tie sweep (`tie_sweep.py`) as a JSON fixture.

Not a test (pytest does not collect it). Run it in an environment where DomainBed's `collect_results`
imports (torch, torchvision, numpy, tqdm; `wilds` and `pytz` for its dataset module), on an exported
DomainBed tree:

    python tests/parity/record_domainbed_selection.py --domainbed /path/to/DomainBed --commit b93c22a

It writes the sweep to a temporary directory, runs `python -m domainbed.scripts.collect_results` on it
twice (plain text and `--latex`), parses every table it prints and writes
`tests/parity/fixtures/domainbed_collect_results.json`: per output format, selection method (by the name
DomainBed prints) and table (dataset name or "Averages"), the column labels and, per algorithm, the cells
exactly as printed. `test_selection_parity.py` compares dgmoe's tables with these cells.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tie_sweep  # noqa: E402  (found through the sys.path entry above)

FIXTURE = HERE / "fixtures" / "domainbed_collect_results.json"
#: {format: {method name: {table: {"columns": [...], "rows": {algorithm: [cells]}}}}}
Tables = dict[str, dict[str, dict[str, dict]]]


def run_collect_results(domainbed: Path, input_dir: Path, latex: bool) -> str:
    """stdout of DomainBed's collect_results (it also writes results.txt/.tex into input_dir)."""
    cmd = [sys.executable, "-m", "domainbed.scripts.collect_results", "--input_dir", str(input_dir)]
    env = {**os.environ, "PYTHONPATH": str(domainbed)}
    done = subprocess.run(cmd + (["--latex"] if latex else []), cwd=domainbed, env=env, check=True,
                          capture_output=True, text=True)
    return done.stdout


def parse_text(out: str) -> tuple[int, dict[str, dict[str, dict]]]:
    """(total records, tables) from the plain-text output: a `-------- ` header, labels, one row per line."""
    total = int(re.search(r"^Total records: (\d+)$", out, re.MULTILINE).group(1))
    tables: dict[str, dict[str, dict]] = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        head = re.match(r"^-------- (?:Dataset: (.+?)|(Averages)), model selection method: (.+)$", line)
        if not head:
            continue
        name, method = head.group(1) or head.group(2), head.group(3)
        labels = re.split(r" {2,}", lines[i + 1].strip())
        rows = {}
        for row in lines[i + 2:]:
            if not row.strip():
                break
            cells = re.split(r" {2,}", row.strip())
            rows[cells[0]] = cells[1:]
        tables.setdefault(method, {})[name] = {"columns": labels[1:], "rows": rows}
    return total, tables


def parse_latex(out: str) -> dict[str, dict[str, dict]]:
    """Tables from the `--latex` output: \\subsection per method, \\subsubsection per table, `&` rows."""
    tables: dict[str, dict[str, dict]] = {}
    method = name = None
    table: dict | None = None
    for line in out.splitlines():
        if m := re.match(r"^\\subsection\{Model selection: (.+)\}$", line):
            method = m.group(1)
        elif m := re.match(r"^\\subsubsection\{(.+)\}$", line):
            name = m.group(1)
        elif line.startswith("\\begin{tabular}"):
            table = {"columns": [], "rows": {}}
            tables.setdefault(method, {})[name] = table
        elif table is not None and " & " in line:
            cells = [c.strip() for c in re.sub(r"\s*\\\\\s*$", "", line).split(" & ")]
            if not table["columns"]:
                table["columns"] = [re.sub(r"^\\textbf\{(.*)\}$", r"\1", c) for c in cells[1:]]
            else:
                table["rows"][cells[0]] = cells[1:]
        elif line.startswith("\\end{tabular}"):
            table = None
    return tables


def count_cells(tables: Tables) -> int:
    return sum(len(cells) for fmt in tables.values() for method in fmt.values()
               for table in method.values() for cells in table["rows"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domainbed", type=Path, required=True, help="an exported DomainBed source tree")
    parser.add_argument("--commit", default=None, help="DomainBed commit of that tree (default: git rev-parse)")
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args()
    domainbed = args.domainbed.resolve()
    commit = args.commit or subprocess.run(["git", "-C", str(domainbed), "rev-parse", "--short", "HEAD"],
                                           check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="tie_sweep_") as tmp:
        root = Path(tmp) / "sweep"
        n_records = tie_sweep.write_sweep(root)
        digest = tie_sweep.sweep_digest(root)
        n_runs = len(list(root.iterdir()))
        text = run_collect_results(domainbed, root, latex=False)
        latex = run_collect_results(domainbed, root, latex=True)
    total, text_tables = parse_text(text)
    if total != n_records:
        raise SystemExit(f"DomainBed read {total} records, the sweep has {n_records}")
    tables = {"text": text_tables, "latex": parse_latex(latex)}
    fixture = {
        "peer": "DomainBed",
        "peer_repo": "https://github.com/facebookresearch/DomainBed",
        "peer_commit": commit,
        "peer_command": "python -m domainbed.scripts.collect_results --input_dir SWEEP [--latex]",
        "regenerate": "python tests/parity/record_domainbed_selection.py --domainbed /path/to/DomainBed "
                      f"--commit {commit}",
        "sweep": {"generator": "tests/parity/tie_sweep.py", "seed": tie_sweep.SEED, "records": n_records,
                  "run_dirs": n_runs, "sha256": digest},
        "total_records": total,
        "cells": count_cells(tables),
        "tables": tables,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = re.sub(r"\[\n\s+(.*?)\n\s+\]", lambda m: "[" + re.sub(r",\n\s+", ", ", m.group(1)) + "]",
                  json.dumps(fixture, indent=1), flags=re.DOTALL)  # one line per row of cells
    args.out.write_text(text + "\n")
    print(f"wrote {args.out}: {fixture['cells']} cells from {n_records} records in {n_runs} run dirs")


if __name__ == "__main__":
    main()
