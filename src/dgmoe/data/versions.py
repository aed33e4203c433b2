"""Published versions of the catalogue's datasets, and which one a folder holds.

A `DataVersion` is what a version is known by: its image count per domain (and, where known, per domain and
class) and, where the data was at hand, the sha256 of its sorted file list (`domain/class/file` lines). The
catalogue lists each dataset's versions (`DatasetSpec.versions`); `identify` names the version a folder
holds, or the closest one and what differs (`dgmoe data check`), and every folder-dataset run records the
version it trained on (config.json `dataset.version`, the records' `args.data_version`; the results tables
print it).

Known versions:
- PACS (Li et al., ICCV 2017): the official release, 9,991 images (art_painting 2,048, cartoon 2,344, photo
  1,670, sketch 3,929), counted per class and hashed from the copy in the shared data folder (file list and
  content fingerprint, with per-file digests to name a file that differs).
- TerraIncognita (Beery et al., ECCV 2018, as DomainBed filters it): 24,788 images, the version DomainBed's,
  SWAD's and MIRO's papers used (per domain from MIRO's authors, khanrc/miro#9: location_100 4,879,
  location_38 9,767, location_43 4,020, location_46 6,122); 24,330 images, what DomainBed's download script
  gives since the original archive moved (MIRO#9, DomainBed#58), known by its total only.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from dgmoe.data.tree import class_folders, images_under

#: a folder that matches no known version
UNKNOWN = "unknown"


@dataclass(frozen=True)
class DataVersion:
    """A published version: `counts` per domain (None: only the `total` is known), `class_counts` per domain
    and class where known, `files_sha256` of the sorted file list where the data was at hand."""

    name: str
    total: int
    counts: Mapping[str, int] | None = None
    class_counts: Mapping[str, Mapping[str, int]] | None = None
    files_sha256: str | None = None
    source: str = ""
    #: the content fingerprint (`dgmoe.data.content.fingerprint`) where the data was at hand, and the package
    #: resource holding its per-file digests (named on a mismatch)
    content_sha256: str | None = None
    content_files: str | None = None


@dataclass(frozen=True)
class FolderCounts:
    """What a `<root>/<domain>/<class>/<file>` folder holds, read without decoding an image."""

    root: Path
    class_counts: Mapping[str, Mapping[str, int]]
    files_sha256: str

    @property
    def counts(self) -> dict[str, int]:
        return {d: sum(c.values()) for d, c in self.class_counts.items()}

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class VersionMatch:
    """`version`: the matching version's name (`UNKNOWN` if none); `closest` and `differences` otherwise."""

    version: str
    closest: str | None = None
    differences: tuple[str, ...] = field(default_factory=tuple)

    def describe(self, dataset: str) -> str:
        if self.version != UNKNOWN:
            return f"{dataset}: version {self.version}"
        if self.closest is None:
            return f"{dataset}: no known version to compare with"
        return (f"{dataset}: no known version; closest is {self.closest}, which differs in: "
                + "; ".join(self.differences))


def files_hash(lines: Sequence[str]) -> str:
    """sha256 of the sorted `domain/class/file` lines, one per line."""
    # a name that is not UTF-8 is hashed as the bytes the file system holds (Python keeps them as surrogates)
    return hashlib.sha256("".join(f"{line}\n" for line in sorted(lines)).encode("utf-8", "surrogateescape")
                          ).hexdigest()


def _visible(entries: Sequence[os.DirEntry]) -> list[os.DirEntry]:
    return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)


def count_folder(root: str | Path) -> FolderCounts:
    """Count the files of every `<domain>/<class>/` folder under `root` (hidden names left out); a layout
    `dgmoe train` refuses (links that count images twice or relabel them) raises its `LayoutError`."""
    root = Path(root)
    classes: dict[str, dict[str, int]] = {}
    lines: list[str] = []
    with os.scandir(root) as domains:
        for domain in _visible(list(domains)):
            if not domain.is_dir():
                continue
            classes[domain.name] = {}
            with os.scandir(domain.path) as found:
                for cls in _visible(list(found)):
                    if not cls.is_dir():
                        continue
                    with os.scandir(cls.path) as files:
                        names = [f.name for f in _visible(list(files)) if f.is_file()]
                    classes[domain.name][cls.name] = len(names)
                    lines += [f"{domain.name}/{cls.name}/{n}" for n in names]
    folders = class_folders(root, classes)  # what `dgmoe train` refuses, refused here too: a class folder reached
    for folder in folders.values():          # twice, a symlink loop or a link into another class folder
        images_under(folder, folders)
    return FolderCounts(root, classes, files_hash(lines))


def differences(found: FolderCounts, version: DataVersion) -> list[str]:
    """What differs between a folder and a version, domain by domain (and class by class where known)."""
    out: list[str] = []
    if version.counts is None:
        return [] if found.total == version.total else [f"{found.total:,} images, the version has {version.total:,}"]
    counts = found.counts
    for domain, want in version.counts.items():
        if domain not in counts:
            out.append(f"domain {domain} is missing ({want:,} images)")
            continue
        if counts[domain] != want:
            out.append(f"{domain}: {counts[domain]:,} images, the version has {want:,}")
        for cls, n in (version.class_counts or {}).get(domain, {}).items():
            got = found.class_counts[domain].get(cls, 0)
            if got != n:
                out.append(f"{domain}/{cls}: {got:,} images, the version has {n:,}")
    out += [f"domain {d} is not in the version ({n:,} images)" for d, n in counts.items() if d not in version.counts]
    if not out and version.files_sha256 and found.files_sha256 != version.files_sha256:
        out.append("the same counts but other file names (file-list hash differs)")
    return out


def identify(found: FolderCounts, versions: Sequence[DataVersion]) -> VersionMatch:
    """The version `found` holds: by file-list hash where the version has one, else by its counts."""
    if not versions:
        return VersionMatch(UNKNOWN)
    diffs = {v.name: differences(found, v) for v in versions}
    for v in versions:
        if not diffs[v.name]:
            return VersionMatch(v.name)
    closest = min(versions, key=lambda v: (abs(found.total - v.total), len(diffs[v.name])))
    return VersionMatch(UNKNOWN, closest.name, tuple(diffs[closest.name]))


PACS_CLASS_COUNTS = {
    "art_painting": {"dog": 379, "elephant": 255, "giraffe": 285, "guitar": 184, "horse": 201, "house": 295,
                     "person": 449},
    "cartoon": {"dog": 389, "elephant": 457, "giraffe": 346, "guitar": 135, "horse": 324, "house": 288,
                "person": 405},
    "photo": {"dog": 189, "elephant": 202, "giraffe": 182, "guitar": 186, "horse": 199, "house": 280, "person": 432},
    "sketch": {"dog": 772, "elephant": 740, "giraffe": 753, "guitar": 608, "horse": 816, "house": 80, "person": 160},
}
PACS = (DataVersion("official (9,991 images)", 9991, {d: sum(c.values()) for d, c in PACS_CLASS_COUNTS.items()},
                    PACS_CLASS_COUNTS, "ac73610e0797b3130c284061d0b5d1e9119b998a2af08c205b224e3de9acf2b1",
                    "Li et al., ICCV 2017; DomainBed's download",
                    # computed on 2026-12-07 from the shared data folder's PACS (DomainBed's download) by
                    # `dgmoe data check --content ../shared/data/PACS`; its per-file digests by
                    # `dgmoe.data.content.write_per_file(path, fingerprint(folder))`
                    content_sha256="1d834dbac374da965c582663bf83ab5a0e9eee6fc2c8b76da6aa8afc88fa6e1b",
                    content_files="pacs_files.json.gz"),)
TERRA_INCOGNITA = (
    DataVersion("24,788 images (DomainBed, SWAD, MIRO papers)", 24788,
                {"location_100": 4879, "location_38": 9767, "location_43": 4020, "location_46": 6122},
                source="per domain: khanrc/miro#9"),
    DataVersion("24,330 images (DomainBed's download since the archive moved)", 24330,
                source="khanrc/miro#9, facebookresearch/DomainBed#58; per-domain counts not published"),
)
