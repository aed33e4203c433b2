"""On-disk cache of a folder dataset as pre-resized uint8 arrays, so training is not decode-bound.

Layout of `<cache_dir>/<Dataset>/<img_size>px/`:
- `domain{i}_images.npy`: uint8 `[N_i, 3, S, S]` (written through a memmap into a temporary file, then
  renamed atomically, so a reader never sees a half-written array and memory stays small while writing);
- `domain{i}_labels.npy`: int64 `[N_i]`;
- `manifest.json`, written last: format version, dataset, image size, domains, classes, per-domain counts and
  file names, and `source_hash` (sha256 over every source file's relative path and size, see
  `FolderListing.source_hash`).

Writers take an exclusive `flock` on `.prepare.lock` in the folder (released by the kernel however the writer
dies); every file is written through `dgmoe.atomic`, and the next writer removes the temporary files that a
killed one left.

A cache is used only when the manifest matches the request and, when the source folder is available, the
source hash still matches the files on disk; otherwise dgmoe falls back to decoding (with a warning).
Arrays are opened memory-mapped, so a 224 px DomainNet cache needs no RAM beyond the page cache.
"""
from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dgmoe.atomic import atomic_path, remove_stale_temporaries, write_bytes_atomic, write_text_atomic
from dgmoe.data.arrays import ArrayDomain
from dgmoe.data.errors import CacheError
from dgmoe.data.folder import FolderListing, decode_files

CACHE_FORMAT = 1
MANIFEST = "manifest.json"
LOCK = ".prepare.lock"
RESIZE = "PIL convert('RGB') + resize((S, S), BILINEAR)"


def default_cache_dir() -> Path:
    """`$DGMOE_CACHE_DIR`, else `$XDG_CACHE_HOME/dgmoe/data`, else `~/.cache/dgmoe/data`."""
    if os.environ.get("DGMOE_CACHE_DIR"):
        return Path(os.environ["DGMOE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dgmoe" / "data"


def cache_folder(cache_dir: str | Path | None, dataset: str, img_size: int) -> Path:
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / dataset / f"{img_size}px"


@dataclass(frozen=True)
class CacheInfo:
    folder: Path
    counts: tuple[int, ...]
    seconds: float
    nbytes: int


def _atomic_save(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, array)
    write_bytes_atomic(path, buffer.getvalue())


@contextlib.contextmanager
def _writer_lock(folder: Path):
    """The folder's writer lock (waits for another writer); temporaries of dead writers removed once held."""
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        remove_stale_temporaries(folder)
        for tmp in folder.glob(".*.tmp-*"):  # the temporaries of an earlier dgmoe's writer
            tmp.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)


def write_cache(dataset: str, listing: FolderListing, img_size: int, folder: Path, workers: int = 0,
                progress: bool = False) -> CacheInfo:
    """Decode every image of `listing` at `img_size` into `folder` (see module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    with _writer_lock(folder):
        return _write_cache(dataset, listing, img_size, folder, workers, progress)


def _write_cache(dataset: str, listing: FolderListing, img_size: int, folder: Path, workers: int,
                 progress: bool) -> CacheInfo:
    start = time.perf_counter()
    (folder / MANIFEST).unlink(missing_ok=True)  # the cache is invalid until the new manifest lands
    image_files, label_files, nbytes = [], [], 0
    for d, domain in enumerate(listing.domains):
        images_path, labels_path = folder / f"domain{d}_images.npy", folder / f"domain{d}_labels.npy"
        with atomic_path(images_path) as tmp:  # written through a memmap: memory stays small
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8,
                                            shape=(listing.counts()[d], 3, img_size, img_size))
            decode_files(listing.paths(d), img_size, workers, out=out,
                         progress=f"{dataset}/{domain}" if progress else None)
            out.flush()
            nbytes += out.nbytes
            del out
        _atomic_save(labels_path, np.asarray(listing.labels[d], dtype=np.int64))
        image_files.append(images_path.name)
        label_files.append(labels_path.name)
    seconds = time.perf_counter() - start
    manifest = {
        "format": CACHE_FORMAT,
        "dataset": dataset,
        "img_size": img_size,
        "channels": 3,
        "resize": RESIZE,
        "domains": list(listing.domains),
        "classes": list(listing.classes),
        "counts": listing.counts(),
        "images": image_files,
        "labels": label_files,
        "source_root": str(listing.root),
        "source_hash": listing.source_hash(),
        "seconds_to_build": round(seconds, 2),
    }
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1))
    return CacheInfo(folder, tuple(listing.counts()), seconds, nbytes)


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise CacheError(f"no cache manifest at {path} (run `dgmoe data prepare`)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CacheError(f"unreadable cache manifest {path}: {e}") from None
    if manifest.get("format") != CACHE_FORMAT:
        raise CacheError(f"{path}: cache format {manifest.get('format')!r}, this dgmoe reads {CACHE_FORMAT}")
    return manifest


def read_cache(folder: Path, dataset: str, img_size: int, listing: FolderListing | None = None,
               expected_domains: tuple[str, ...] | None = None) -> tuple[list[ArrayDomain], dict]:
    """Open a cache memory-mapped; raises `CacheError` saying why when it does not match the request."""
    manifest = read_manifest(folder)
    if manifest.get("dataset") != dataset or manifest.get("img_size") != img_size:
        raise CacheError(f"{folder} holds {manifest.get('dataset')} at {manifest.get('img_size')} px, "
                         f"not {dataset} at {img_size} px")
    if expected_domains is not None and tuple(manifest["domains"]) != tuple(sorted(expected_domains)):
        raise CacheError(f"{folder}: domains {manifest['domains']} differ from {sorted(expected_domains)}")
    if listing is not None:
        if tuple(manifest["domains"]) != listing.domains or tuple(manifest["classes"]) != listing.classes:
            raise CacheError(f"{folder}: domains/classes differ from the source folder {listing.root}")
        if manifest["source_hash"] != listing.source_hash():
            raise CacheError(f"{folder} is stale: the files under {listing.root} changed since it was prepared")
    envs = []
    for images_name, labels_name, count in zip(manifest["images"], manifest["labels"], manifest["counts"]):
        try:
            images = np.load(folder / images_name, mmap_mode="r")
            labels = np.load(folder / labels_name)
        except (OSError, ValueError) as e:
            raise CacheError(f"cannot open cache file in {folder}: {e}") from None
        if images.shape != (count, 3, img_size, img_size) or labels.shape != (count,):
            raise CacheError(f"{folder / images_name}: shape {images.shape}, manifest says "
                             f"{(count, 3, img_size, img_size)}")
        envs.append(ArrayDomain(images, labels))
    return envs, manifest
