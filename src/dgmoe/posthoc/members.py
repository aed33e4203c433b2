"""The runs a weight average may combine: read from run folders, grouped, and checked to share an architecture,
an initialisation and their data.

A member is a finished run folder (`done`, `config.json`, a readable weights file). Two runs share an
*architecture* when they name the same model and their weights files hold the same tensor names and shapes; they
share an *initialisation* when their step-0 weights are the same: the same pretrained checkpoint (file name and
content hash, as each run recorded it in config.json when it started: a file replaced since changes nothing) for
a pretrained backbone, the same `seed` for one trained from scratch (its random initialisation is a function of
that seed), and the same classifier head at step 0 (its kind and, for CLIP's zero-shot head, its prompt
templates, class names and text tower, as each run recorded them: `Member.head`). Weight averaging is only
meaningful between such runs (Rame et al., DiWA, NeurIPS 2022, Sec. 3: the linear mode connectivity of
fine-tunings from one shared initialisation). They share their *data* when they
subsampled, split and held out the same images: `--n-per-domain`, `--holdout-fraction`, `--uda-holdout-fraction`,
the dataset's version and the split sizes they recorded.

A run folder that cannot be a member (still training, unfinished, unreadable, without weights) is a `LeftOut`:
`dgmoe soup` refuses to average beside it, unless told to make the soups without it (marked partial).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from dgmoe.engine.checkpoint import read_run_config, saved_run, weights_file
from dgmoe.engine.config import RunConfig
from dgmoe.engine.lock import lock_holder
from dgmoe.engine.provenance import file_sha256, initialisation
from dgmoe.engine.rundir import read_done
from dgmoe.engine.runtree import os_reason, walk_run_folders
from dgmoe.errors import DgmoeError, UsageError

SOUP_KEY = "soup"  # config.json / args key of a soup's own run folder (never a member of another soup)


@dataclass
class Member:
    """One finished run a soup may average."""

    run_dir: Path
    config: dict[str, Any]
    weights: Path

    @functools.cached_property
    def run(self) -> RunConfig:
        """The run's settings (`dgmoe.engine.checkpoint.saved_run`)."""
        return saved_run(self.config)

    @property
    def dataset(self) -> str:
        return self.run.data.dataset

    @property
    def test_envs(self) -> tuple[int, ...]:
        return tuple(self.config.get("splits", {}).get("test_envs") or self.run.data.test_envs)

    @property
    def trial_seed(self) -> int:
        return self.run.seeds.trial_seed

    @property
    def algorithm(self) -> str:
        return self.run.algorithm.name

    @property
    def model(self) -> str:
        return self.run.model.name

    @functools.cached_property
    def architecture(self) -> tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]:
        """(model name, ((tensor name, shape), ...)) of the weights file."""
        from safetensors import safe_open

        with safe_open(str(self.weights), "pt") as f:
            shapes = tuple((k, tuple(f.get_slice(k).get_shape())) for k in sorted(f.keys()))
        return self.model, shapes

    @property
    def initialisation(self) -> str:
        """The run's step-0 weights as it recorded them when it started (`dgmoe.engine.provenance.initialisation`);
        for a run trained before dgmoe recorded them, the pretrained file as it is now."""
        recorded = self.config.get("initialisation")
        return recorded if isinstance(recorded, str) else initialisation(self.run.model.pretrained,
                                                                         self.run.seeds.seed)

    @functools.cached_property
    def head(self) -> dict[str, Any]:
        """The classifier head the run started from, as it recorded it when it started
        (`dgmoe.engine.build.head_identity`); for a run trained before dgmoe recorded it, as its config says."""
        recorded = self.config.get("head")
        if isinstance(recorded, dict):
            return recorded
        from dgmoe.engine.build import head_identity, text_head_spec

        dataset = self.config.get("dataset") or {}
        spec = text_head_spec(self.run, dataset.get("name") or self.dataset, dataset.get("classes") or ())
        return head_identity(self.run, spec)

    @property
    def data(self) -> tuple[tuple[str, Any], ...]:
        """(what, value) of everything that decides the images the run trained and validated on."""
        d, splits, dataset = self.run.data, self.config.get("splits") or {}, self.config.get("dataset") or {}
        return (("--n-per-domain", d.n_per_domain), ("--holdout-fraction", d.holdout_fraction),
                ("--uda-holdout-fraction", d.uda_holdout_fraction), ("dataset version", dataset.get("version")),
                ("images per domain", dataset.get("sizes")), ("'in' split sizes", splits.get("in")),
                ("'out' split sizes", splits.get("out")))

    @functools.cached_property
    def sha256(self) -> str:
        """The SHA-256 of the weights file (part of a soup's identity)."""
        return file_sha256(self.weights)

    @property
    def group(self) -> tuple[str, tuple[int, ...], int, str, str]:
        """(dataset, held-out domains, trial seed, algorithm, model): the runs DiWA averages (its hparams draws)."""
        return self.dataset, self.test_envs, self.trial_seed, self.algorithm, self.model


@dataclass(frozen=True)
class LeftOut:
    """A run folder that cannot be a soup member, why, and its group (None when its config cannot be read)."""

    run_dir: Path
    reason: str
    group: tuple | None = None

    @property
    def pool(self) -> tuple | None:
        """(dataset, held-out domains, trial seed, model): its ratatouille pool, whatever its algorithm."""
        return None if self.group is None else self.group[:3] + self.group[4:]


def find_members(root: Path, which: str = "best",
                 notes: list[str] | None = None) -> tuple[list[Member], list[LeftOut]]:
    """Every run folder under `root` (a `config.json` that is not a soup's; through symbolic links, each folder
    once: `dgmoe.engine.runtree`), in sorted order: the finished ones with readable weights as members, the
    others (still training, unfinished, unreadable, no weights) and the folders that cannot be listed as
    `LeftOut`. Hidden folders (temporaries of killed writers) are not looked into. The links that were not
    followed (a loop, a second link to one folder, a link to nothing) are appended to `notes`."""
    members, left_out = [], []
    tree = walk_run_folders(root, "config.json", skip=lambda name: name.startswith("."))
    left_out += [LeftOut(folder, f"cannot be listed: {why}; its runs cannot be read")
                 for folder, why in tree.unreadable]
    if notes is not None:
        notes += tree.links
    for run_dir in tree.found:
        try:
            config = read_run_config(run_dir)
        except DgmoeError as e:
            left_out.append(LeftOut(run_dir, f"unreadable: {e}"))
            continue
        except OSError as e:
            left_out.append(LeftOut(run_dir, f"unreadable config.json ({os_reason(e)})"))
            continue
        if SOUP_KEY in config:
            continue
        member = Member(run_dir, config, run_dir / "none")
        try:
            group: tuple | None = member.group
        except (DgmoeError, KeyError, TypeError, ValueError) as e:
            left_out.append(LeftOut(run_dir, f"its config.json is not a run's: {e}"))
            continue
        try:
            done = read_done(run_dir)
        except OSError as e:
            left_out.append(LeftOut(run_dir, f"unreadable done file ({os_reason(e)})", group))
            continue
        if done is None:
            holder = lock_holder(run_dir)
            why = f"still training (pid {holder.get('pid', '?')})" if holder else "unfinished (no done file)"
            left_out.append(LeftOut(run_dir, why, group))
            continue
        try:
            path, _ = weights_file(run_dir, which)
        except (FileNotFoundError, DgmoeError):
            left_out.append(LeftOut(run_dir, f"no {which} weights", group))
            continue
        try:
            (run_dir / "results.jsonl").open("rb").close()  # the soup's record starts from a member's
        except OSError as e:
            left_out.append(LeftOut(run_dir, f"unreadable results.jsonl ({os_reason(e)})", group))
            continue
        member = Member(run_dir, config, path)
        try:
            member.sha256  # (safetensors says "No such file or directory" for a file it may not read)
        except OSError as e:
            left_out.append(LeftOut(run_dir, f"unreadable weights {path.name} ({os_reason(e)})", group))
            continue
        try:
            member.architecture
        except Exception as e:  # safetensors' own error types: a truncated or foreign file
            left_out.append(LeftOut(run_dir, f"unreadable weights {path.name} ({' '.join(str(e).split())})", group))
            continue
        members.append(member)
    return members, left_out


#: (key of a `Member.head`, how the command line names it)
HEAD_FIELDS = (("kind", "--head"), ("templates", "--prompt-templates"), ("class_names", "class names"),
               ("text_tower", "text tower (--text-pretrained, else --pretrained)"))


def head_difference(first: Member, other: Member) -> str | None:
    """'--prompt-templates domainbed vs openai_imagenet': the first field in which the heads two runs started from
    differ (class names: their count, or the first that differs), or None when they share one."""
    a, b = first.head, other.head
    for key, what in HEAD_FIELDS:
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        if isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return f"{what}: {len(x)} vs {len(y)}"
            i = next(i for i, (p, q) in enumerate(zip(x, y)) if p != q)
            return f"{what}: class {i} {x[i]!r} vs {y[i]!r}"
        return f"{what} {x} vs {y}"
    return None if a == b else f"head {a} vs {b}"


def check_shared(members: Iterable[Member]) -> None:
    """Refuse, in one line, runs that do not share an architecture, an initialisation (the classifier head they
    started from included: `head_difference`) or their data."""
    members = list(members)
    first = members[0]
    for other in members[1:]:
        if other.architecture != first.architecture:
            what = (f"models {first.model} and {other.model}" if other.model != first.model
                    else "the same model built with different weight shapes")
            raise UsageError(f"{first.run_dir} and {other.run_dir} do not share an architecture ({what}); a weight "
                             "average needs runs of one architecture: run `dgmoe soup` on a folder of each")
        if other.initialisation != first.initialisation:
            raise UsageError(f"{first.run_dir} and {other.run_dir} do not share an initialisation "
                             f"({first.initialisation} vs {other.initialisation}); a weight average needs runs "
                             "fine-tuned from one initialisation (same --pretrained file, or same --seed)")
        head = head_difference(first, other)
        if head:
            raise UsageError(f"{first.run_dir} and {other.run_dir} did not start from the same classifier head "
                             f"({head}); a weight average needs runs fine-tuned from one initialisation, head "
                             "included")
        differs = [(what, a, b) for (what, a), (_, b) in zip(first.data, other.data) if a != b]
        if differs:
            what, a, b = differs[0]
            raise UsageError(f"{first.run_dir} and {other.run_dir} were not trained on the same data ({what} {a} vs "
                             f"{b}); a weight average needs runs of one dataset, subsample and splits")
