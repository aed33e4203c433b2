"""How long `dgmoe report` takes over a large sweep, and how soon its index is on disk.

Writes N fake finished runs (records, config.json and done only, no training: the report tests' fixture,
`tests/helpers/report_sweep.py`, 2 algorithms x 2 models x 4 PACS test domains x N/16 trial seeds), then builds
their report and prints the CPU and wall seconds until `index.html` is written and until the report is done,
the number of pages and the report's size. A benchmark to run by hand, not a test (no verdict on speed):

    PYTHONPATH=src python benchmarks/report_index.py [--runs 2000] [--pages selected|all|none] [--keep DIR]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="fake runs to report (default 2000)")
    parser.add_argument("--pages", choices=("selected", "all", "none"), default="selected")
    parser.add_argument("--keep", type=Path, default=None, help="write the runs and the report here and keep them")
    args = parser.parse_args(argv)

    from report_sweep import make_runs

    from dgmoe.report.html import build_report, report_size

    with tempfile.TemporaryDirectory() as tmp:
        root = (args.keep or Path(tmp)) / "runs"
        start = time.perf_counter()
        make_runs(root, args.runs)
        made = time.perf_counter() - start
        marks: dict[str, float] = {}
        cpu0, wall0 = time.process_time(), time.perf_counter()

        def on_index(path: Path) -> None:
            marks["index_cpu_s"], marks["index_wall_s"] = time.process_time() - cpu0, time.perf_counter() - wall0

        index = build_report(root, pages=args.pages, on_index=on_index)
        marks["total_cpu_s"], marks["total_wall_s"] = time.process_time() - cpu0, time.perf_counter() - wall0
        pages = len(list((index.parent / "runs").glob("*.html")))
        size = report_size(index) / 1e6
    print(f"{args.runs} fake runs (written in {made:.1f} s), --pages {args.pages}:")
    print(f"  index.html written after {marks['index_cpu_s']:.1f} s CPU ({marks['index_wall_s']:.1f} s wall)")
    print(f"  report done after {marks['total_cpu_s']:.1f} s CPU ({marks['total_wall_s']:.1f} s wall): "
          f"{pages} run pages, {size:.1f} MB")
    return marks


if __name__ == "__main__":
    main()
