"""Every run folder under a root, described for the report: what it trained, what it scored, what it drew.

`scan_runs` reads each folder with a `results.jsonl` once (unfinished and unreadable ones included, with the
problem stated) and returns `RunInfo`s that name a run by what it is, `algorithm / model / test domain`
(never by its folder or a hash alone), with its selected checkpoint, its cost and its figures: the
`*.png` / `*.md` files `dgmoe analyze` and `dgmoe geo analyze` leave in `<run>/analysis/` or
`<run>/figures/`, and the geo figures `dgmoe geo sentinel` leaves in `<runs>/figures/<run name>_*.png`.
"""
from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from dgmoe.analysis.style import block_name
from dgmoe.engine.runtree import walk_run_folders
from dgmoe.records import train_domain_val_acc
from dgmoe.report.collect import RecordError, count_envs, model_label, read_records
from dgmoe.selection import python_argmax

#: run-local folders whose figures and tables belong to the run.
FIGURE_DIRS: tuple[str, ...] = ("analysis", "figures")
#: geo figures written next to the runs as `<runs>/figures/<run name>_<kind>.png`.
GEO_FIGURES: tuple[str, ...] = ("routing_map", "routing_frequency", "forced_experts")
_TITLES: tuple[tuple[str, str, bool], ...] = (  # (file stem prefix, heading, the rest names a layer)
    ("cub_parts_", "CUB-DG parts x experts", True), ("cub_attributes_", "CUB-DG attributes x experts", True),
    ("cub_routing_", "CUB-DG routing maps with the parts", True),
    ("cub_domains_", "CUB-DG: the same images in every domain", True),
    ("routing_map", "Discovered domains on the map (top-1 expert)", False),
    ("routing_frequency", "Routing frequency (top-1 expert per image)", False),
    ("forced_experts", "Forced-expert accuracy", False), ("routing_", "Top-1 expert per patch", True),
    ("expert_usage", "Expert usage per domain", False), ("attention_maps", "CLS attention per head", False),
)


@dataclass(frozen=True)
class Selected:
    """The checkpoint training-domain validation picks in one run (DomainBed's IID rule, run level)."""

    step: int
    val_acc: float      # mean out-split accuracy of the training domains
    test_acc: float     # mean in-split accuracy of the test domains
    worst_test_acc: float


@dataclass
class RunInfo:
    """One run folder as the report shows it."""

    path: Path
    rel: str
    records: list[dict[str, Any]]
    done: bool
    problem: str | None = None
    slug: str = ""
    params: int | None = None
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def dataset(self) -> str:
        return str(self.args.get("dataset", "?"))

    @property
    def algorithm(self) -> str:
        return str(self.args.get("algorithm", "?"))

    @property
    def model(self) -> str:
        """The backbone with its overrides, as the results tables name it."""
        return model_label(str(self.args.get("model") or ""), self.args) or "?"

    @property
    def domains(self) -> list[str]:
        n = count_envs(self.records[-1]) if self.records else 0
        names = self.args.get("domains")
        return [str(d) for d in names] if names and len(names) == n else [f"env{i}" for i in range(n)]

    @property
    def test_envs(self) -> list[int]:
        envs = self.args.get("test_envs") or []
        return [int(e) for e in envs if isinstance(e, int) and 0 <= e < len(self.domains)]

    @property
    def test_domains(self) -> list[str]:
        return [self.domains[e] for e in self.test_envs]

    def test_text(self, limit: int = 3) -> str:
        """`photo`, `art, sketch`, or `6 domains: A/test, B/test, C/test, ...`."""
        names = self.test_domains
        if not names:
            return "none"
        if len(names) <= limit:
            return ", ".join(names)
        return f"{len(names)} domains: " + ", ".join(names[:limit]) + ", ..."

    @property
    def seeds(self) -> str:
        parts = [f"trial {self.args.get('trial_seed', '?')}", f"hp {self.args.get('hparams_seed', '?')}"]
        if self.args.get("seed") is not None:
            parts.append(f"seed {self.args['seed']}")
        return ", ".join(parts)

    @property
    def seed_pair(self) -> str:
        """`0 / 1`: trial seed / hparams seed, as the run index prints them."""
        return f"{self.args.get('trial_seed', '?')} / {self.args.get('hparams_seed', '?')}"

    @property
    def label(self) -> str:
        """`ERM / gmoe_tiny_patch16_224 / test photo` (`<--label> / test photo` for a labelled run): how the
        report names this run everywhere."""
        name = self.args.get("label") or f"{self.algorithm} / {self.model}"
        return f"{name} / test {self.test_text()}"

    @property
    def last_step(self) -> int | None:
        steps = [r["step"] for r in self.records if isinstance(r.get("step"), (int, float))]
        return int(max(steps)) if steps else None

    def mean_of(self, key: str) -> float | None:
        vals = [r[key] for r in self.records if isinstance(r.get(key), (int, float))]
        return float(np.mean(vals)) if vals else None

    def spread_of(self, key: str) -> float | None:
        """The standard deviation of a numeric record field over the run's checkpoints (its noise)."""
        vals = [r[key] for r in self.records if isinstance(r.get(key), (int, float))]
        return float(np.std(vals)) if len(vals) > 1 else None

    def max_of(self, key: str) -> float | None:
        vals = [r[key] for r in self.records if isinstance(r.get(key), (int, float))]
        return float(max(vals)) if vals else None

    @cached_property
    def selected(self) -> Selected | None:
        """The checkpoint with the best mean out-split accuracy of the training domains (first best in file
        order, as `dgmoe.selection.IIDAccuracySelection`); None without training or test domains."""
        train = [i for i in range(len(self.domains)) if i not in self.test_envs]
        if not train or not self.test_envs:
            return None
        try:
            vals = [train_domain_val_acc(r, self.test_envs, len(self.domains)) for r in self.records]
            best = python_argmax(vals)
            if best is None:
                return None
            rec = self.records[best]
            tests = [float(rec[f"env{t}_in_acc"]) for t in self.test_envs]
        except (KeyError, TypeError, ValueError):
            return None
        return Selected(int(rec["step"]), vals[best], float(np.mean(tests)), float(min(tests)))

    def figures(self) -> list[Path]:
        """PNG figures of this run (its analysis/ and figures/ folders, and `<parent>/figures/<name>_*.png`),
        routing first, then usage, attention and the rest, blocks in numeric order."""
        found = [p for d in FIGURE_DIRS for p in (self.path / d).glob("*.png")]
        shared = self.path.parent / "figures"
        if shared.is_dir() and shared != self.path / "figures":
            found += [shared / f"{self.path.name}_{kind}.png" for kind in GEO_FIGURES
                      if (shared / f"{self.path.name}_{kind}.png").is_file()]
        return sorted(found, key=lambda p: _figure_order(p, self.path.name))

    def tables(self) -> list[Path]:
        """Markdown summaries of this run (`dgmoe analyze`'s expert usage, head redundancy, CUB-DG tables)."""
        return [p for d in FIGURE_DIRS for p in sorted((self.path / d).glob("*.md"))]


def figure_title(path: Path, run_name: str = "") -> str:
    """A heading for a figure file: `routing_blocks.8.mlp.png` -> `Top-1 expert per patch, block 8 (...)`."""
    stem = path.stem
    if run_name and stem.startswith(run_name + "_"):
        stem = stem[len(run_name) + 1:]
    for prefix, text, layered in _TITLES:
        if stem.startswith(prefix):
            rest = stem[len(prefix):].strip("_")
            if layered and rest:
                return f"{text}, {block_name(rest)}"
            return f"{text} ({rest.replace('_', ' ')})" if rest else text
    return stem.replace("_", " ")


def _figure_order(path: Path, run_name: str) -> tuple:
    stem = path.stem[len(run_name) + 1:] if path.stem.startswith(run_name + "_") else path.stem
    rank = next((i for i, (prefix, _, _) in enumerate(_TITLES) if stem.startswith(prefix)), len(_TITLES))
    order = ("routing_map", "routing_frequency", "forced_experts", "routing_", "expert_usage", "attention_maps")
    first = next((i for i, prefix in enumerate(order) if stem.startswith(prefix)), len(order) + rank)
    return first, [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", stem)], str(path)


def _slug(text: str, limit: int = 48) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:limit].strip("-") or "run"


def read_run(path: Path, root: Path) -> RunInfo:
    """One run folder; a folder whose records cannot be read is returned with `problem` set."""
    rel = str(path.relative_to(root)) if path != root else "."
    done = (path / "done").exists()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a partial last line is expected while a run trains
            records = [r for _, r in read_records(path / "results.jsonl", check=True)]
    except (OSError, RecordError) as err:
        return RunInfo(path, rel, [], done, problem=str(err))
    if not records:
        return RunInfo(path, rel, [], done, problem="results.jsonl holds no record yet")
    args = records[-1].get("args")
    if not isinstance(args, dict):
        return RunInfo(path, rel, records, done, problem="its records have no 'args' object")
    return RunInfo(path, rel, records, done, args=args)


def _count_params(run: Path, cache: dict[str, int | None]) -> int | None:
    """Parameters of the run's network, rebuilt from config.json (cached per distinct model build)."""
    try:
        from dgmoe.engine.checkpoint import build_network, read_run_config

        config = read_run_config(run)
        key = json.dumps(config["model_build"], sort_keys=True, default=str)
        if key not in cache:
            cache[key] = sum(p.numel() for p in build_network(config).parameters())
        return cache[key]
    except Exception:  # an old or foreign run folder: the column is just left empty
        return None


def scan_runs(root: Path, count_params: bool = True) -> list[RunInfo]:
    """Every folder with a `results.jsonl` under `root` (through links, `dgmoe.engine.runtree`), sorted by
    dataset, algorithm, model, test domains and seeds, each with a unique file-name-safe `slug`
    (`r007-ERM-vit-tiny-photo`)."""
    runs = [read_run(folder, root) for folder in walk_run_folders(root, "results.jsonl").found]
    runs.sort(key=lambda r: (r.problem is not None, r.dataset, r.algorithm, r.model, r.test_envs,
                             str(r.args.get("trial_seed")), str(r.args.get("hparams_seed")), r.rel))
    cache: dict[str, int | None] = {}
    for i, run in enumerate(runs):
        name = f"{run.algorithm}-{run.args.get('model') or ''}-{'-'.join(run.test_domains)}" if not run.problem \
            else run.rel
        run.slug = f"r{i + 1:03d}-{_slug(name)}"
        if count_params and not run.problem:
            run.params = _count_params(run.path, cache)
    return runs

