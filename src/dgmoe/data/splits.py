"""DomainBed's per-domain in/out split and test-environment checks.

DomainBed (`misc.split_dataset`, called from `train.py`) shuffles `list(range(n))` with
`np.random.RandomState(seed).shuffle`, takes the first `int(n * holdout_fraction)` keys as the held-out
"out" split and the rest as "in", with `seed = seed_hash(trial_seed, env_index)`. `split_domain` reproduces
that draw exactly, so dgmoe's splits are DomainBed's splits for the same trial seed.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.errors import TestEnvError
from dgmoe.names import test_envs_problem
from dgmoe.seeding import seed_hash


def split_domain(n: int, holdout_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`(in_indices, out_indices)` of a domain with `n` items; `out` = first int(n * holdout) of the shuffle."""
    if n < 0:
        raise ValueError(f"domain size must be >= 0, got {n}")
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
    keys = np.arange(n)  # RandomState.shuffle gives the same permutation for an array as for DomainBed's list
    np.random.RandomState(seed).shuffle(keys)
    n_out = int(n * holdout_fraction)
    return keys[n_out:], keys[:n_out]


def domain_splits(dataset: MultiDomainDataset, holdout_fraction: float = 0.2,
                  trial_seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """`(in, out)` indices for every domain, seeded by `seed_hash(trial_seed, env_index)` as DomainBed."""
    return [split_domain(n, holdout_fraction, seed_hash(trial_seed, i)) for i, n in enumerate(dataset.sizes())]


def uda_splits(splits: Sequence[tuple[np.ndarray, np.ndarray]], test_envs: Sequence[int], uda_holdout_fraction: float,
               trial_seed: int = 0) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict[int, np.ndarray]]:
    """DomainBed's unlabeled split: each test domain's `in` split is split again, with the same seed
    `seed_hash(trial_seed, env_index)`, its first `int(len(in) * uda_holdout_fraction)` shuffled items becoming
    the `uda` split and the rest staying `in`. Returns the new `(in, out)` splits and `{env: uda indices}` for
    the test domains whose uda split is not empty. A fraction of 0 leaves the splits as they are (DomainBed
    re-shuffles the test domains' `in` items then, which no accuracy depends on)."""
    if not uda_holdout_fraction:
        return list(splits), {}
    out, uda = list(splits), {}
    for i in test_envs:
        in_idx, out_idx = splits[i]
        kept, held = split_domain(len(in_idx), uda_holdout_fraction, seed_hash(trial_seed, i))
        out[i] = (in_idx[kept], out_idx)
        if len(held):
            uda[i] = in_idx[held]
    return out, uda


def check_test_envs(dataset: MultiDomainDataset, test_envs: Sequence[int]) -> list[int]:
    """Validate test environment indices (`dgmoe.names.test_envs_problem`: the error lists the dataset's domains
    with their indices); the sorted indices."""
    problem = test_envs_problem(dataset.name, list(dataset.domains), list(dataset.eval_domains),
                                [int(t) if isinstance(t, np.integer) else t for t in test_envs])
    if problem:
        raise TestEnvError(problem)
    return sorted(int(t) for t in test_envs)
