"""DomainBed's folder layout `<root>/<domain>/<class>/<image>`: discovery, validation and decoding.

Domains and classes are the *sorted* folder names (DomainBed's `MultipleEnvironmentImageFolder`); within a
class folder images are found recursively and sorted by path, as torchvision's ImageFolder does. Unlike
ImageFolder-per-domain, classes are the sorted union over all domains, so a class missing from one domain
cannot shift the labels of the others (a warning is logged instead: a dgmoe line on the console and in a run's
train.log).

Images are decoded with Pillow, converted to RGB and resized to a square `img_size` with bilinear
filtering, i.e. exactly DomainBed's eval `Resize((s, s))` on a PIL image; the uint8 result is the storage
format of every image dataset in dgmoe.
"""
from __future__ import annotations

import hashlib
import logging
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from dgmoe.data.errors import LAYOUT, EmptyDomainError, LayoutError
from dgmoe.data.images import read_rgb
from dgmoe.data.tree import IMG_EXTENSIONS
from dgmoe.data.tree import class_folders as tree_class_folders
from dgmoe.data.tree import images_under as _images_under
from dgmoe.data.tree import visible_dirs as _visible_dirs

DECODE_CHUNK = 128
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FolderListing:
    """The image files of a folder dataset: per domain, paths relative to the domain folder and labels."""

    root: Path
    domains: tuple[str, ...]
    classes: tuple[str, ...]
    files: tuple[tuple[str, ...], ...]
    labels: tuple[tuple[int, ...], ...]

    def paths(self, domain_index: int) -> list[str]:
        base = os.path.join(self.root, self.domains[domain_index])
        return [os.path.join(base, f) for f in self.files[domain_index]]

    def counts(self) -> list[int]:
        return [len(f) for f in self.files]

    def class_counts(self, domain_index: int) -> list[int]:
        return np.bincount(np.asarray(self.labels[domain_index], dtype=np.int64), minlength=len(self.classes)).tolist()

    def source_hash(self) -> str:
        """sha256 over every `domain/relative_path <size in bytes>`: changes when a file is added, removed,
        renamed or rewritten with another size (mtimes are left out so a copied dataset keeps its hash)."""
        h = hashlib.sha256()
        for d, domain in enumerate(self.domains):
            for rel, path in zip(self.files[d], self.paths(d)):
                h.update(f"{domain}/{rel}\t{os.stat(path).st_size}\n".encode())
        return h.hexdigest()


def scan_folder(
    root: Path,
    dataset: str,
    expected_domains: Sequence[str] | None = None,
    num_classes: int | None = None,
) -> FolderListing:
    """List a `<root>/<domain>/<class>/<image>` tree and check it against what the catalogue expects."""
    if not root.is_dir():
        raise LayoutError(f"{dataset}: {root} is not a directory (expected layout {LAYOUT})")
    domains = _visible_dirs(root)
    if expected_domains is not None and domains != sorted(expected_domains):
        missing = sorted(set(expected_domains) - set(domains))
        extra = sorted(set(domains) - set(expected_domains))
        raise LayoutError(
            f"{dataset}: expected domain folders {', '.join(sorted(expected_domains))} in {root}; "
            f"found {', '.join(domains) or 'no folders'}"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; unexpected: {', '.join(extra)}" if extra else "")
            + f" (layout {LAYOUT})"
        )
    if not domains:
        raise LayoutError(f"{dataset}: no domain folders in {root} (expected layout {LAYOUT})")
    per_domain_classes: dict[str, list[str]] = {}
    for domain in domains:
        classes = _visible_dirs(root / domain)
        if not classes:
            loose = _images_under(root / domain)
            what = f"{len(loose)} loose image files" if loose else "nothing"
            raise LayoutError(
                f"{dataset}: domain folder {root / domain} has no class folders (found {what}); "
                f"expected {root / domain}/<class>/<image>"
            )
        per_domain_classes[domain] = classes
    classes = sorted(set().union(*per_domain_classes.values()))
    class_folders = tree_class_folders(root, per_domain_classes)
    if num_classes is not None and len(classes) != num_classes:
        raise LayoutError(
            f"{dataset}: expected {num_classes} class folders per domain in {root}, found {len(classes)} "
            f"({', '.join(classes[:10])}{', ...' if len(classes) > 10 else ''})"
        )
    class_index = {c: i for i, c in enumerate(classes)}
    files: list[tuple[str, ...]] = []
    labels: list[tuple[int, ...]] = []
    for domain in domains:
        dom_files: list[str] = []
        dom_labels: list[int] = []
        empty = []
        for c in per_domain_classes[domain]:
            imgs = _images_under(root / domain / c, {r: f for r, f in class_folders.items() if f != root / domain / c})
            if not imgs:
                empty.append(c)
            dom_files += [os.path.join(c, f) for f in imgs]
            dom_labels += [class_index[c]] * len(imgs)
        if not dom_files:
            raise EmptyDomainError(
                f"{dataset}: domain folder {root / domain} contains no images "
                f"(looked for {', '.join(IMG_EXTENSIONS)} under {root / domain}/<class>/)"
            )
        absent = sorted(set(classes) - set(per_domain_classes[domain])) + empty
        if absent:
            log.warning(f"{dataset}: domain {domain!r} has no images of class(es) {', '.join(sorted(absent))} "
                        "(labels stay those of the sorted class folders of all domains)")
        files.append(tuple(dom_files))
        labels.append(tuple(dom_labels))
    return FolderListing(root, tuple(domains), tuple(classes), tuple(files), tuple(labels))


def decode_image(path: str | Path, img_size: int) -> np.ndarray:
    """One image as uint8 `[3, img_size, img_size]` (RGB, bilinear square resize); names the file on failure."""
    return read_rgb(path, img_size)


def _decode_chunk(paths: Sequence[str], img_size: int) -> np.ndarray:
    if not paths:
        return np.zeros((0, 3, img_size, img_size), np.uint8)
    return np.stack([decode_image(p, img_size) for p in paths])


def decode_files(
    paths: Sequence[str | Path],
    img_size: int,
    workers: int = 0,
    out: np.ndarray | None = None,
    progress: str | None = None,
) -> np.ndarray:
    """Decode `paths` into `out` (a new uint8 array `[N, 3, S, S]` when None, or e.g. a memmap).

    `workers > 0` decodes chunks of images in that many processes; the result is identical either way.
    """
    n = len(paths)
    if out is None:
        out = np.empty((n, 3, img_size, img_size), dtype=np.uint8)
    if out.shape != (n, 3, img_size, img_size):
        raise ValueError(f"out has shape {out.shape}, expected {(n, 3, img_size, img_size)}")
    chunks = [[str(p) for p in paths[i:i + DECODE_CHUNK]] for i in range(0, n, DECODE_CHUNK)]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc=progress, unit="img", leave=False)
    if workers > 0 and len(chunks) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = pool.map(_decode_chunk, chunks, [img_size] * len(chunks))
            for k, arr in enumerate(results):
                out[k * DECODE_CHUNK:k * DECODE_CHUNK + len(arr)] = arr
                if bar is not None:
                    bar.update(len(arr))
    else:
        for k, chunk in enumerate(chunks):
            out[k * DECODE_CHUNK:k * DECODE_CHUNK + len(chunk)] = _decode_chunk(chunk, img_size)
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return out


class FolderDomain(Dataset):
    """A lazily decoded domain: each access opens and resizes the file (DomainBed's ImageFolder behaviour).

    Used when a dataset is too large to decode into memory and has no cache; put DataLoader workers on it.
    """

    def __init__(self, paths: Sequence[str | Path], labels: Sequence[int], img_size: int):
        self.paths = [str(p) for p in paths]
        self.labels = torch.as_tensor(list(labels), dtype=torch.long)
        self.img_size = img_size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        return torch.from_numpy(decode_image(self.paths[index], self.img_size)), int(self.labels[index])

    def gather(self, indices):
        idx = torch.as_tensor(indices, dtype=torch.long)
        x = torch.from_numpy(_decode_chunk([self.paths[i] for i in idx.tolist()], self.img_size))
        return x, self.labels[idx], None


def subsample_indices(n: int, n_per_domain: int | None, seed: int) -> np.ndarray:
    """A seeded subset of `min(n, n_per_domain)` indices of `range(n)`, sorted (all of them when None)."""
    if n_per_domain is None or n_per_domain >= n:
        return np.arange(n)
    if n_per_domain <= 0:
        raise ValueError(f"n_per_domain must be a positive integer, got {n_per_domain}")
    return np.sort(np.random.RandomState(seed).permutation(n)[:n_per_domain])
