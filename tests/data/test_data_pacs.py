"""PACS end to end from ../shared/data at low resolution (skipped when the folder is absent)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgmoe.data import TrainBatches, domain_splits, eval_loader, get_dataset, get_transforms, prepare_dataset

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not (SHARED / "PACS").is_dir(), reason=f"PACS not found under {SHARED}")

COUNTS = [2048, 2344, 1670, 3929]  # art_painting, cartoon, photo, sketch (PACS README)


def test_pacs_subsample_end_to_end(tmp_path):
    ds = get_dataset("PACS", SHARED, img_size=32, n_per_domain=24, cache_dir=tmp_path)
    assert ds.domains == ["art_painting", "cartoon", "photo", "sketch"]
    assert ds.classes == ["dog", "elephant", "giraffe", "guitar", "horse", "house", "person"]
    assert ds.input_shape == (3, 32, 32) and [len(e) for e in ds.environments] == [24] * 4
    x, y = ds[3][0]
    assert x.dtype == torch.uint8 and x.shape == (3, 32, 32) and 0 <= y < 7
    assert ds[0].images.std() > 20  # real photos/paintings, not blank
    splits = domain_splits(ds, 0.2, trial_seed=0)
    train_tf, eval_tf = get_transforms("PACS", 32)
    batches = TrainBatches([ds[i] for i in (0, 1, 2)], [splits[i][0] for i in (0, 1, 2)], 8, 0, train_tf).batch_at(0)
    assert [b.x.shape for b in batches] == [(8, 3, 32, 32)] * 3
    evals = list(eval_loader(ds[3], splits[3][0], eval_tf, batch_size=16))
    assert sum(len(b.y) for b in evals) == 24 - int(24 * 0.2)


def test_pacs_listing_counts():
    from dgmoe.data.catalogue import get_spec, scan

    listing = scan(get_spec("PACS"), SHARED)
    assert listing.counts() == COUNTS
    assert listing.class_counts(2)[-1] == 432  # photo/person


@pytest.mark.slow
def test_pacs_full_cache_at_32px(tmp_path):
    info = prepare_dataset("PACS", SHARED, img_size=32, cache_dir=tmp_path, workers=2)
    assert list(info.counts) == COUNTS
    ds = get_dataset("PACS", SHARED, img_size=32, cache_dir=tmp_path)
    assert isinstance(ds[0].images, np.memmap) and [len(e) for e in ds.environments] == COUNTS
    sub = get_dataset("PACS", SHARED, img_size=32, n_per_domain=24, cache_dir=tmp_path / "none")
    cached_sub = get_dataset("PACS", SHARED, img_size=32, n_per_domain=24, cache_dir=tmp_path)
    for a, b in zip(sub.environments, cached_sub.environments):
        np.testing.assert_array_equal(a.images, b.images)
