"""DomainBed's per-domain in/out split and test-env validation."""
from __future__ import annotations

import numpy as np
import pytest

from dgmoe.data import TestEnvError, check_test_envs, domain_splits, get_dataset, split_domain
from dgmoe.seeding import seed_hash


def domainbed_split(n: int, holdout: float, seed: int):
    """DomainBed's misc.split_dataset on range(n), as written there (a Python list shuffled in place)."""
    keys = list(range(n))
    np.random.RandomState(seed).shuffle(keys)
    n_out = int(n * holdout)
    return keys[n_out:], keys[:n_out]


def test_known_answer():
    in_idx, out_idx = split_domain(10, 0.2, 0)
    assert out_idx.tolist() == [2, 8]
    assert in_idx.tolist() == [4, 9, 1, 6, 7, 3, 0, 5]


@pytest.mark.parametrize("n,holdout,seed", [(2048, 0.2, 894182419), (7, 0.2, 1), (1670, 0.3, 5), (5, 0.0, 3)])
def test_matches_domainbed(n, holdout, seed):
    in_idx, out_idx = split_domain(n, holdout, seed)
    ref_in, ref_out = domainbed_split(n, holdout, seed)
    assert in_idx.tolist() == ref_in and out_idx.tolist() == ref_out


def test_deterministic_disjoint_and_sized():
    a = split_domain(1001, 0.2, 42)
    b = split_domain(1001, 0.2, 42)
    c = split_domain(1001, 0.2, 43)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], c[1])
    in_idx, out_idx = a
    assert len(out_idx) == 200 and len(in_idx) == 801
    assert not set(in_idx) & set(out_idx)
    assert sorted(np.concatenate([in_idx, out_idx]).tolist()) == list(range(1001))


def test_bad_holdout():
    with pytest.raises(ValueError, match="holdout_fraction"):
        split_domain(10, 1.0, 0)


def test_domain_splits_seed_each_env_by_trial_seed_and_index():
    ds = get_dataset("Debug28", None)
    splits = domain_splits(ds, 0.25, trial_seed=3)
    for i, (in_idx, out_idx) in enumerate(splits):
        ref = split_domain(16, 0.25, seed_hash(3, i))
        assert np.array_equal(in_idx, ref[0]) and np.array_equal(out_idx, ref[1])
    other = domain_splits(ds, 0.25, trial_seed=4)
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(splits, other))


def test_check_test_envs():
    ds = get_dataset("Debug28", None)
    assert check_test_envs(ds, [2, 0]) == [0, 2]
    with pytest.raises(TestEnvError, match=r"test env 3 is out of range for Debug28, which has 3 domains \(0=0"):
        check_test_envs(ds, [3])
    with pytest.raises(TestEnvError, match="out of range"):
        check_test_envs(ds, [-1])
    with pytest.raises(TestEnvError, match="repeat"):
        check_test_envs(ds, [1, 1])
    with pytest.raises(TestEnvError, match="no training domain"):
        check_test_envs(ds, [0, 1, 2])


def domainbed_uda_split(n: int, holdout: float, uda_fraction: float, seed: int):
    """DomainBed's train.py for a test env: split_dataset(env), then split_dataset(in_) with the same seed;
    `_SplitDataset` maps the second split's keys through the first's."""
    in_keys, out_keys = domainbed_split(n, holdout, seed)
    kept, held = domainbed_split(len(in_keys), uda_fraction, seed)
    return [in_keys[k] for k in kept], out_keys, [in_keys[k] for k in held]


@pytest.mark.parametrize("uda_fraction", [0.1, 0.5])
def test_uda_split_matches_domainbed(uda_fraction):
    from dgmoe.data import uda_splits

    sizes, holdout, trial_seed, test_envs = [50, 37, 64, 21], 0.2, 3, [1, 2]
    splits = [split_domain(n, holdout, seed_hash(trial_seed, i)) for i, n in enumerate(sizes)]
    new, uda = uda_splits(splits, test_envs, uda_fraction, trial_seed)
    assert sorted(uda) == test_envs
    for i, n in enumerate(sizes):
        if i in test_envs:
            ref_in, ref_out, ref_uda = domainbed_uda_split(n, holdout, uda_fraction, seed_hash(trial_seed, i))
            assert new[i][0].tolist() == ref_in and new[i][1].tolist() == ref_out and uda[i].tolist() == ref_uda
        else:
            assert new[i] is splits[i]
    assert uda_splits(splits, test_envs, 0.0, trial_seed) == (splits, {})
