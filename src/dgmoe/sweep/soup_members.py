"""The runs a weight average may combine: read from run folders, grouped, and checked to share an architecture
and an initialisation.

A member is a finished run folder (`done`, `config.json`, a weights file). Two runs share an *architecture* when
they name the same model and their weights files hold the same tensor names and shapes; they share an
*initialisation* when their step-0 weights are the same: the same pretrained checkpoint (file name and content
hash) for a pretrained backbone, the same `seed` for one trained from scratch (its random initialisation is a
function of that seed). Weight averaging is only meaningful between such runs (Rame et al., DiWA, NeurIPS 2022,
Sec. 3: the linear mode connectivity of fine-tunings from one shared initialisation).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from dgmoe.engine.checkpoint import read_run_config, saved_run, weights_file
from dgmoe.engine.config import RunConfig
from dgmoe.engine.provenance import pretrained_identity
from dgmoe.engine.rundir import read_done
from dgmoe.errors import UsageError

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
        """The pretrained checkpoint's identity, or 'random init, seed N' for a backbone trained from scratch."""
        found = pretrained_identity(self.run.model.pretrained)
        return found or f"random init, seed {self.run.seeds.seed}"

    @property
    def group(self) -> tuple[str, tuple[int, ...], int, str, str]:
        """(dataset, held-out domains, trial seed, algorithm, model): the runs DiWA averages (its hparams draws)."""
        return self.dataset, self.test_envs, self.trial_seed, self.algorithm, self.model


def find_members(root: Path, which: str = "best") -> list[Member]:
    """Every finished run folder under `root` with weights, soups left out, in sorted order."""
    members = []
    for config_path in sorted(Path(root).rglob("config.json")):
        run_dir = config_path.parent
        if read_done(run_dir) is None:
            continue
        config = read_run_config(run_dir)
        if SOUP_KEY in config:
            continue
        try:
            path, _ = weights_file(run_dir, which)
        except FileNotFoundError:
            continue
        members.append(Member(run_dir, config, path))
    return members


def check_shared(members: Iterable[Member]) -> None:
    """Refuse, in one line, runs that do not share an architecture or an initialisation."""
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
