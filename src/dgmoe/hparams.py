"""The hyperparameter spec language of DomainBed's registry.

Every hyperparameter is an `HParam(default, sampler, check)`. A random draw for `name` uses its own
`np.random.RandomState(seed_hash(seed, name))`, so adding a hyperparameter never perturbs the draws of
the others (DomainBed's `_hparam`). Algorithms declare their own hyperparameters next to their code as a
class attribute `HPARAMS: dict[str, HParam]`; the shared ones and the resolution of a run's values live in
`dgmoe.engine.hparams`. What a dataset decides about hyperparameters is a `DatasetHParams`, declared in the
dataset's catalogue entry (`dgmoe.data.catalogue.DatasetSpec.hparams`): no code compares a dataset's name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from dgmoe.errors import UsageError
from dgmoe.seeding import seed_hash

Sampler = Callable[[np.random.RandomState], Any]

Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class HParam:
    """A hyperparameter: its default, its random-search sampler and, optionally, a constraint on values
    given by hand (`check(value)` returns what is wrong, or None). Its type is its default's."""

    default: Any
    sample: Sampler
    check: Check | None = None

    def draw(self, name: str, seed: int) -> Any:
        value = self.sample(np.random.RandomState(seed_hash(seed, name)))
        return value.item() if isinstance(value, np.generic) else value

    def validate(self, name: str, value: Any) -> None:
        """Raise a UsageError naming `--hparams` and `name` when `value` does not fit this hyperparameter."""
        default, problem = self.default, None
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if isinstance(default, bool):
            problem = None if isinstance(value, bool) else "must be true or false"
        elif isinstance(default, int):
            problem = None if is_int else "must be an integer"
        elif isinstance(default, float):
            if not (is_int or isinstance(value, float)):
                problem = "must be a number"
            elif not math.isfinite(value):
                problem = "must be a finite number"
        elif isinstance(default, str):
            problem = None if isinstance(value, str) else "must be a string"
        if problem is None and self.check is not None:
            problem = self.check(value)
        if problem is not None:
            raise UsageError(f"--hparams {name} {problem}, got {value!r}")


def positive(value: Any) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be >= 0"


def probability(value: Any) -> str | None:
    """A dropout-like rate: in [0, 1)."""
    return None if 0 <= value < 1 else "must be in [0, 1)"


def one_of(*options: Any) -> Check:
    return lambda value: None if value in options else f"must be one of {', '.join(map(repr, options))}"


def log_uniform(lo: float, hi: float) -> Sampler:
    """10 ** U(lo, hi)."""
    return lambda r: float(10 ** r.uniform(lo, hi))


def uniform(lo: float, hi: float) -> Sampler:
    return lambda r: float(r.uniform(lo, hi))


def pow2_int(lo: float, hi: float) -> Sampler:
    """int(2 ** U(lo, hi)) as DomainBed's batch-size draws."""
    return lambda r: int(2 ** r.uniform(lo, hi))


def choice(options: list) -> Sampler:
    return lambda r: options[r.choice(len(options))]


def fixed(value: Any) -> Sampler:
    return lambda r: value


def as_int(sampler: Sampler) -> Sampler:
    """`int(sampler(r))`: DomainBed's integer draws such as `int(10 ** r.uniform(0, 4))`."""
    return lambda r: int(sampler(r))


@dataclass(frozen=True)
class DatasetHParams:
    """What a dataset decides about a run's hyperparameters (DomainBed's `hparams_registry` by dataset name,
    GMoE Table 8), declared once in the dataset's catalogue entry and read by `dgmoe.engine.hparams` and the
    algorithms' `hparam_specs`.

    - `small_images`: DomainBed's SMALL_IMAGES datasets (28-px digits, GeoMNIST, the Sentinel-2 sample): lr
      1e-3, batch 64, no weight decay or stochastic depth, and the algorithms' small-image entries.
    - `gmoe_lr_wd`: (lr, weight decay) of sparse backbones (GMoE Table 8); None: 5e-5 and 0.
    - `batch_size_log2_max`: the upper end of DomainBed's batch-size draw 2^U(3, hi) (DomainNet 5, else 5.5).
    - `algorithms`: per algorithm, entries that replace its own on this dataset (DomainBed's per-dataset
      entries for RDM; MIRO's official lambda for PACS and VLCS); the algorithm must declare each name.
    - `region_field`, `regions`: the metadata field whose values are the dataset's regions ("" when its
      environments are the regions) and how many there are (0: none), D3G's default heads.
    """

    small_images: bool = False
    gmoe_lr_wd: tuple[float, float] | None = None
    batch_size_log2_max: float = 5.5
    algorithms: Mapping[str, Mapping[str, HParam]] = field(default_factory=dict)
    region_field: str = ""
    regions: int = 0

    def for_algorithm(self, algorithm: str) -> dict[str, HParam]:
        return dict(self.algorithms.get(algorithm, {}))


#: DomainBed's 28-px datasets.
SMALL_IMAGES = DatasetHParams(small_images=True)
