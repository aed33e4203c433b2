"""Print a pip constraints file pinning every run-time dependency of dgmoe to the lowest version pyproject.toml
declares, so that CI installs those lowest versions together (`.ci/lowest`). torch is left out: its CPU wheel is
the one this project's machines hold (docs/scaling.md gives the tested range of torch)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
for requirement in project["dependencies"]:
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", requirement.split(";")[0].strip())
    if match is None:
        raise SystemExit(f"pyproject.toml: {requirement!r} has no plain lower bound (NAME>=VERSION)")
    name, lowest = match.groups()
    if name != "torch":
        print(f"{name}=={lowest}")
