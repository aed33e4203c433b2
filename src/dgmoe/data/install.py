"""`dgmoe data download`: install a dataset folder from its declared sources (`dgmoe.data.sources`), verified.

For each source in order every part is fetched into `<data_dir>/.dgmoe-downloads/<name>/` (resumable `.part`
files, `dgmoe.data.fetch`), its published checksum checked (a mismatch keeps the file aside as `*.rejected`, names
both values and moves on to the next source), then unpacked safely (`dgmoe.data.unpack`) into a hidden folder
beside the target, converted to dgmoe's layout where the source needs it, fingerprinted
(`dgmoe.data.content`) and swapped in whole (`dgmoe.atomic.atomic_folder`) with its `.dgmoe-source.json`. A
kill at any moment leaves the old folder or the new one, plus hidden folders and `.part` files that the same
command cleans up or continues. The folder is reported as the version whose content fingerprint it has
("official ..."), as a version known by its image counts only, or as an unknown fingerprint: never "official"
unless its bytes are.
"""
from __future__ import annotations

import datetime
import difflib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dgmoe.atomic import atomic_folder, remove_stale_folders, write_json_atomic
from dgmoe.data import content
from dgmoe.data.conversions import CONVERSIONS
from dgmoe.data.sources import Download, Part, Source, downloads
from dgmoe.errors import DataMismatchError, UsageError

CACHE = ".dgmoe-downloads"


class DownloadError(DataMismatchError):
    """No source gave the dataset (every source and its error named), or what one gave was not what it claims."""


@dataclass(frozen=True)
class Installed:
    """What `install` put at `folder`: the `record` written as its `.dgmoe-source.json`, and `verdict`, one line."""

    folder: Path
    record: dict[str, Any]
    verdict: str


def find(name: str) -> Download:
    """The `Download` named `name` (case-insensitive; a catalogue dataset name finds the download serving it)."""
    table = downloads()
    for d in table.values():
        if name.lower() == d.name.lower():
            return d
    serving = [d for d in table.values() if name in d.datasets]
    if len(serving) == 1:
        return serving[0]
    if serving:
        raise UsageError(f"NAME {name} reads the folders of {len(serving)} downloads: name them "
                         f"({' '.join(d.name for d in serving)})")
    close = difflib.get_close_matches(name, [*table, *(n for d in table.values() for n in d.datasets)], n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"NAME {name!r} is no dataset dgmoe can download{hint} (see `dgmoe data download --list`)")


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(content.BLOCK):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, part: Part, keep_aside: bool = True) -> str:
    """Check `path` against `part`'s published size and checksums; returns its sha256. A mismatch renames the
    file `<name>.rejected` (kept for inspection, never used; a user's own `--archive` is left where it is,
    `keep_aside=False`) and raises naming expected and got."""
    got_sha = _digest(path, "sha256")
    problems = []
    if part.size is not None and path.stat().st_size != part.size:
        problems.append(f"size {path.stat().st_size:,} bytes, expected {part.size:,}")
    if part.md5 is not None and (got := _digest(path, "md5")) != part.md5:
        problems.append(f"md5 {got}, expected {part.md5}")
    if part.sha256 is not None and got_sha != part.sha256:
        problems.append(f"sha256 {got_sha}, expected {part.sha256}")
    if problems:
        if not keep_aside:
            raise DownloadError(f"{path}: checksum mismatch with the published {part.filename}: "
                                f"{'; '.join(problems)}")
        aside = path.with_name(path.name + ".rejected")
        os.replace(path, aside)
        raise DownloadError(f"{part.filename}: checksum mismatch: {'; '.join(problems)} (kept aside as {aside})")
    return got_sha


def _fetch(source: Source, part: Part, dest: Path, progress: bool | None) -> None:
    if source.kind == "http":  # a finished file of an earlier run is checked and kept, a `.part` one resumed
        from dgmoe.data import fetch

        fetch.download(part.location, dest, size=part.size, md5=part.md5, sha256=part.sha256, progress=progress)
        return
    if source.kind == "manual":
        raise DownloadError(f"a licence is accepted by hand here: fetch {part.filename} from {part.location}, "
                            "then pass it with --archive FILE")
    if dest.exists():  # a finished file of an earlier run: verified again below
        return
    from dgmoe.data.fetch_hubs import download_drive, download_hub

    if source.kind == "gdrive":
        download_drive(part.location, dest, size=part.size, md5=part.md5, sha256=part.sha256, progress=progress)
    else:
        assert source.revision is not None  # every hub source declares one (`Source`)
        download_hub(part.location, part.filename, source.revision, dest, repo_type=source.repo_type,
                     sha256=part.sha256, progress=progress)


def _merge(src: Path, dst: Path) -> None:
    """Move everything under `src` into `dst` (folders merged), then remove `src`."""
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        target = dst / entry.name
        if entry.is_dir() and not entry.is_symlink() and target.is_dir():
            _merge(entry, target)
        else:
            os.replace(entry, target)
    src.rmdir()


def _place(tree: Path, part: Part, archive: Path, index: int) -> None:
    from dgmoe.data.unpack import unpack

    into = tree / part.into if part.into else tree
    if not part.unpack:
        into.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, into / part.filename)
        return
    staged = tree / f".dgmoe-part-{index}"
    unpack(archive, staged, members_root=part.root, replace=True)
    _merge(staged, into)


def identify(download: Download, folder: Path, found: content.Fingerprint) -> str:
    """One line: which version `folder` (fingerprint `found`) holds, by content, by image counts, or unknown."""
    from dgmoe.data.catalogue import DATASETS
    from dgmoe.data.versions import UNKNOWN, count_folder
    from dgmoe.data.versions import identify as by_counts

    specs = [DATASETS.get(n) for n in download.datasets if n in DATASETS]
    for spec in specs:
        for version in spec.versions:
            if version.content_sha256 == found.sha256:
                return f"official {spec.name} ({version.name}): content fingerprint {found.sha256}"
    for spec in specs:
        if spec.kind == "folder" and spec.versions and spec.dir_name == download.dir_name:
            match = by_counts(count_folder(folder), spec.versions)
            if match.version != UNKNOWN:
                return (f"{spec.name} {match.version} by its image counts; its content fingerprint {found.sha256} is "
                        "not one dgmoe knows")
    return f"unknown fingerprint {found.sha256} (no version dgmoe knows has it)"


def _existing(target: Path) -> str | None:
    """None when `target` is absent or holds exactly what its own source record says; else why it differs."""
    if not target.exists():
        return None
    record_path = target / content.SOURCE_RECORD
    if not record_path.is_file():
        return f"{target} exists and was not installed by dgmoe (no {content.SOURCE_RECORD})"
    record = json.loads(record_path.read_text())
    now = content.fingerprint(target, progress=None).sha256
    if now != record.get("content_sha256"):
        return f"{target} differs from what its {content.SOURCE_RECORD} records (content fingerprint {now})"
    return None


def _sources(download: Download, mirror: str | None, archive: Path | None) -> list[Source]:
    if not download.sources:
        raise DownloadError(f"{download.name} has no public source: {download.reason}")
    first = download.sources[0]
    if archive is not None:
        if len(first.parts) != 1:
            raise UsageError(f"--archive takes one file; {download.name} comes as {len(first.parts)} files "
                             f"({', '.join(p.filename for p in first.parts)})")
        part = first.parts[0]
        return [Source(f"--archive {archive}", "manual", (Part(str(archive), part.filename, part.size, part.md5,
                                                             part.sha256, part.unpack, part.root, part.into),),
                       first.licence, convert=first.convert)]
    if mirror is not None:
        base = mirror if len(first.parts) == 1 else mirror.rstrip("/") + "/"
        parts = tuple(Part(base if len(first.parts) == 1 else base + p.filename, p.filename, p.size, p.md5,
                           p.sha256, p.unpack, p.root, p.into) for p in first.parts)
        return [Source(f"--mirror {mirror}", "http", parts, first.licence, convert=first.convert)]
    return list(download.sources)


def install(name: str, data_dir: str | Path, *, mirror: str | None = None, archive: str | Path | None = None,
            force: bool = False, progress: bool | None = None, echo: Callable[[str], None] = print) -> Installed:
    """Download (or take `archive`), verify, unpack and install dataset `name` under `data_dir`; `progress`:
    bars of bytes fetched and hashed (None: on a terminal only)."""
    from dgmoe import __version__

    download = find(name)
    if not download.dir_name:
        raise UsageError(f"{download.name}: {download.reason}")
    data_dir = Path(data_dir).expanduser()
    if archive is not None and not Path(archive).is_file():
        raise UsageError(f"--archive {archive} is not a file")
    sources = _sources(download, mirror, None if archive is None else Path(archive))
    target = data_dir / download.dir_name
    data_dir.mkdir(parents=True, exist_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_folders(target.parent)
    differs = _existing(target)
    if target.exists() and differs is None and not force:
        record = json.loads((target / content.SOURCE_RECORD).read_text())
        return Installed(target, record, f"already installed, unchanged: {record.get('verdict', '')}")
    if differs is not None and not force:
        raise UsageError(f"{differs}: pass --force to replace it (atomically, once the new copy is verified)")
    errors: list[str] = []
    for index, source in enumerate(sources):
        cache = data_dir / CACHE / download.name / str(index)
        cache.mkdir(parents=True, exist_ok=True)
        try:
            files = []
            for part in source.parts:
                dest = Path(part.location) if archive is not None else cache / Path(part.filename).name
                if archive is None:
                    _fetch(source, part, dest, progress)
                files.append((part, dest, verify(dest, part, keep_aside=archive is None)))
        except Exception as e:  # noqa: BLE001 -- every source's failure is reported, the next one tried
            errors.append(f"{source.name} ({source.kind}): {' '.join(str(e).split()) or type(e).__name__}")
            continue
        return _unpack_and_swap(download, source, files, target, echo, progress, __version__)
    raise DownloadError(f"{download.name}: every source failed: " + "; ".join(
        f"[{i + 1}] {e}" for i, e in enumerate(errors)))


def _unpack_and_swap(download: Download, source: Source, files: list[tuple[Part, Path, str]], target: Path,
                     echo: Callable[[str], None], progress: bool | None, version: str) -> Installed:
    if not source.layout_verified:
        echo(f"note: the layout of {source.name} was not verified by dgmoe's authors; checking the result")
    with atomic_folder(target) as tree:
        for index, (part, path, _) in enumerate(files):
            _place(tree, part, path, index)
        if source.convert is not None:
            CONVERSIONS[source.convert](tree)
        found = content.fingerprint(tree, progress=progress)
        verdict = identify(download, tree, found)
        record = {"dataset": download.name, "source": source.name, "kind": source.kind,
                  "urls": [p.location for p, _, _ in files], "revision": source.revision,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "archives": {p.filename: sha for p, _, sha in files}, "content_sha256": found.sha256,
                  "files": len(found.files), "bytes": found.nbytes, "verdict": verdict,
                  "layout_verified": source.layout_verified, "licence": source.licence, "dgmoe_version": version}
        write_json_atomic(tree / content.SOURCE_RECORD, record)
    if source.note:
        echo(f"note: {source.note}")
    return Installed(target, record, verdict)
