"""A run folder's records without what differs between two runs of the same configuration (timings, the
output folder), so that an interrupted-and-resumed run can be compared with an uninterrupted one."""
from __future__ import annotations

import json
from pathlib import Path

TIMING = {"step_time", "mem_gb", "eval_time"}


def comparable_records(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for row in rows:
        for key in TIMING:
            row.pop(key, None)
        row["args"].pop("output_dir")
    return rows
