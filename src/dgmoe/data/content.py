"""Content fingerprints: which exact bytes a dataset folder holds (`dgmoe data check --content`).

The fingerprint of a folder is the sha256 over every file under it, in the sorted order of their relative POSIX
paths (compared as UTF-8 bytes), each contributing `path`, a NUL byte, its size as 8 big-endian bytes and its
bytes; the record `dgmoe data download` writes (`SOURCE_RECORD`) is left out, so that a downloaded folder and a
copy made another way compare equal. Files are streamed in 1 MiB blocks, so any size fits in memory.

Alongside, every file's own digest (the first 16 hex digits of its sha256) is kept, so that a folder that differs
from a version whose per-file digests are shipped (`PER_FILE` resources, gzipped JSON) is told which file differs.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator, Mapping

from dgmoe.atomic import write_bytes_atomic

#: what `dgmoe data download` writes into the dataset folder it installs; never part of the fingerprint
SOURCE_RECORD = ".dgmoe-source.json"
BLOCK = 2**20
#: hex digits of a file's sha256 kept per file
FILE_DIGEST_CHARS = 16


@dataclass(frozen=True)
class Fingerprint:
    """`sha256`: the folder's content fingerprint; `files`: relative path -> the file's short digest."""

    sha256: str
    files: Mapping[str, str]
    nbytes: int


def _key(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def list_files(root: str | Path) -> list[str]:
    """Every regular file under `root` (links to files followed, links to folders not descended), as sorted
    relative POSIX paths; the source record at the top is left out."""
    root = Path(root)
    out: list[str] = []
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        for name in files:
            path = (rel / name).as_posix()
            if path != SOURCE_RECORD and os.path.isfile(os.path.join(folder, name)):
                out.append(path)
        dirs.sort()
    return sorted(out, key=_key)


def _blocks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            yield block


def fingerprint(root: str | Path, progress: bool | None = False,
                on_bytes: Callable[[int], None] | None = None) -> Fingerprint:
    """The content fingerprint of the folder `root` (see the module docstring); `progress`: a tqdm bar of bytes
    read (None: on a terminal only)."""
    root = Path(root)
    paths = list_files(root)
    sizes = [os.path.getsize(root / p) for p in paths]
    bar = None
    if progress is not False:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(sizes), unit="B", unit_scale=True, unit_divisor=1024, desc=f"hashing {root.name}",
                   disable=None if progress is None else False, leave=False)
    total = hashlib.sha256()
    files: dict[str, str] = {}
    try:
        for path, size in zip(paths, sizes):
            one = hashlib.sha256()
            total.update(_key(path) + b"\0" + size.to_bytes(8, "big"))
            for block in _blocks(root / path):
                total.update(block)
                one.update(block)
                if bar is not None:
                    bar.update(len(block))
                if on_bytes is not None:
                    on_bytes(len(block))
            files[path] = one.hexdigest()[:FILE_DIGEST_CHARS]
    finally:
        if bar is not None:
            bar.close()
    return Fingerprint(total.hexdigest(), files, sum(sizes))


def write_per_file(path: str | Path, found: Fingerprint) -> None:
    """Write `found`'s per-file digests as the gzipped JSON a `PER_FILE` resource holds (mtime 0: reproducible)."""
    data = json.dumps(dict(found.files), sort_keys=True, separators=(",", ":")).encode()
    write_bytes_atomic(path, gzip.compress(data, mtime=0))


def read_per_file(resource: str) -> dict[str, str]:
    """The per-file digests shipped as package data `dgmoe/data/<resource>`."""
    with resources.files("dgmoe.data").joinpath(resource).open("rb") as raw, gzip.GzipFile(fileobj=raw) as f:
        return json.loads(f.read())


def file_differences(found: Mapping[str, str], known: Mapping[str, str], limit: int = 5) -> list[str]:
    """What differs file by file: changed, missing and extra files, the first `limit` of each, named."""
    changed = sorted(p for p in found.keys() & known.keys() if found[p] != known[p])
    missing = sorted(known.keys() - found.keys())
    extra = sorted(found.keys() - known.keys())
    out: list[str] = []
    for label, names in (("changed", changed), ("missing", missing), ("not in the version", extra)):
        if names:
            more = f" and {len(names) - limit:,} more" if len(names) > limit else ""
            out.append(f"{len(names):,} file(s) {label}: {', '.join(names[:limit])}{more}")
    return out
