"""The uint8 data cache (`dgmoe data prepare`) and the `dgmoe data` command line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from dgmoe.cli.data import command
from dgmoe.data import get_dataset, prepare_dataset
from dgmoe.data.cache import MANIFEST, cache_folder

DOMAINS = ("art_painting", "cartoon", "photo", "sketch")
CLASSES = ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")


def make_pacs(data_dir: Path, n: int = 2) -> Path:
    rng = np.random.RandomState(0)
    for dom in DOMAINS:
        for cls in CLASSES:
            folder = data_dir / "PACS" / dom / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.randint(0, 256, (10, 11, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return data_dir


@pytest.fixture
def pacs(tmp_path):
    return make_pacs(tmp_path / "data")


def test_prepare_writes_arrays_and_manifest(pacs, tmp_path):
    info = prepare_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    folder = cache_folder(tmp_path / "cache", "PACS", 8)
    assert info.folder == folder and info.counts == (14, 14, 14, 14)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["domains"] == list(DOMAINS) and manifest["classes"] == list(CLASSES)
    assert manifest["counts"] == [14] * 4 and manifest["img_size"] == 8
    images = np.load(folder / manifest["images"][2])
    assert images.dtype == np.uint8 and images.shape == (14, 3, 8, 8)
    assert not [p for p in folder.iterdir() if ".tmp" in p.name]  # temporary files renamed away
    again = prepare_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    assert again.seconds == 0.0  # valid cache is reused


def test_cached_dataset_equals_decoded(pacs, tmp_path):
    decoded = get_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "empty")
    prepare_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    cached = get_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    assert isinstance(cached[0].images, np.memmap) and not isinstance(decoded[0].images, np.memmap)
    assert cached.domains == decoded.domains and cached.classes == decoded.classes
    for a, b in zip(cached.environments, decoded.environments):
        np.testing.assert_array_equal(np.asarray(a.images), b.images)
        assert torch.equal(a.labels, b.labels)
    x, y = cached[1][3]
    assert x.dtype == torch.uint8 and x.shape == (3, 8, 8)
    # subsampling picks the same items from the cache as from the files
    sub_c = get_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache", n_per_domain=5)
    sub_d = get_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "empty", n_per_domain=5)
    for a, b in zip(sub_c.environments, sub_d.environments):
        np.testing.assert_array_equal(a.images, b.images)


def test_cache_alone_without_data_dir(pacs, tmp_path):
    prepare_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    ds = get_dataset("PACS", None, img_size=8, cache_dir=tmp_path / "cache")
    assert [len(e) for e in ds.environments] == [14] * 4
    with pytest.raises(Exception, match="no usable cache"):
        get_dataset("PACS", None, img_size=16, cache_dir=tmp_path / "cache")


def test_stale_cache_is_ignored_with_a_warning(pacs, tmp_path):
    prepare_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    Image.new("RGB", (5, 5)).save(pacs / "PACS" / "photo" / "dog" / "new.png")
    with pytest.warns(UserWarning, match="stale"):
        ds = get_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    assert len(ds[2]) == 15 and not isinstance(ds[2].images, np.memmap)
    info = prepare_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    assert info.seconds > 0 and info.counts[2] == 15


def test_corrupt_cache_file_falls_back(pacs, tmp_path):
    info = prepare_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    (info.folder / "domain1_images.npy").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="cannot open cache file"):
        ds = get_dataset("PACS", pacs, img_size=8, cache_dir=tmp_path / "cache")
    assert len(ds[1]) == 14


def test_cli_prepare_and_info(pacs, tmp_path):
    runner = CliRunner()
    res = runner.invoke(command, ["prepare", "--dataset", "PACS", "--data-dir", str(pacs), "--img-size", "8",
                                  "--cache-dir", str(tmp_path / "c"), "--workers", "0"])
    assert res.exit_code == 0, res.output
    assert "56 images" in res.output
    res = runner.invoke(command, ["info", "--dataset", "PACS", "--data-dir", str(pacs), "--img-size", "8",
                                  "--cache-dir", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert "4 domains, 7 classes, 56 images" in res.output
    assert "cache at 8 px: valid" in res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("2 ")]
    assert lines and lines[0].split()[:3] == ["2", "photo", "14"]


def test_cli_errors_are_specific(tmp_path, cli):
    res = cli("data", "info", "--dataset", "PAX", "--data-dir", tmp_path)
    assert res.exit_code == 2 and "Did you mean: PACS" in res.output
    res = cli("data", "info", "--dataset", "PACS", "--data-dir", tmp_path)
    assert res.exit_code == 2 and "no folder" in res.output and "PACS" in res.output
    res = cli("data", "prepare", "--dataset", "RotatedMNIST", "--data-dir", tmp_path)
    assert res.exit_code == 2 and "no cache to prepare" in res.output
    res = cli("data", "list")
    assert res.exit_code == 0 and "DomainNet" in res.output and "15001" in res.output
