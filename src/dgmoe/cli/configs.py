"""The configs of the commands that list what a registry holds (`dgmoe models`, `dgmoe algorithms`): their
packages import torch when imported, these configs do not, so that `--help` starts at once. Their options
are generated from these fields (`dgmoe.cli.options`)."""
from __future__ import annotations

from dataclasses import dataclass

from dgmoe.settings import Settings, setting


@dataclass(frozen=True)
class ModelsList(Settings):
    """`dgmoe models [PATTERN]`."""

    pattern: str | None = setting(None, "A glob of model names such as 'gmoe*'.", argument=True)
    names_only: bool = setting(False, "Print the bare names only (one per line, for scripts).", flags=("--names",))
    params: bool = setting(True, "Kept for old scripts: counts are always shown.", hidden=True)


@dataclass(frozen=True)
class AlgorithmsList(Settings):
    """`dgmoe algorithms`."""

    references: bool = setting(True, "Print each algorithm's paper reference.")
