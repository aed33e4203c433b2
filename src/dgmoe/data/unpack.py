"""Safe, atomic extraction of a downloaded archive into a dataset folder.

`unpack(archive, target)` reads a zip, a tar (plain, .gz, .bz2, .xz) or any other file (copied as is) into a
hidden temporary folder beside `target` (`.<target>.<pid>.partial`, `dgmoe.atomic.atomic_folder`: `data check`,
`train` and `info` skip hidden names, and `remove_stale_folders` deletes those a killed process left), then swaps
it in whole: a reader sees no folder, the old one or the new one, never a half-extracted tree. An existing
`target` is replaced only with `replace=True`.

Every member is checked before a byte of it is written, and refused in one line naming it: an absolute path, a
`..` component, a symbolic or hard link pointing out of the folder, a device file or FIFO, and an archive that
expands beyond `max_bytes` (default: `DEFAULT_RATIO` times the archive's size, at least `DEFAULT_FLOOR`: a zip
bomb). A zip member is never inflated past its declared size (zipfile stops there and checks the CRC), and a tar
member's size is its header's, so the cap holds for what reaches the disk. Tars are also extracted through
Python's own `filter="data"` where it exists, as a second line of defence.
"""
from __future__ import annotations

import errno
import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

from dgmoe.atomic import atomic_folder, remove_stale_folders
from dgmoe.data.fetch import check_space
from dgmoe.errors import DgmoeError, DiskFullError, UsageError

#: an archive may expand to at most this many times its own size (JPEG folders expand about 1x, text ~10x) ...
DEFAULT_RATIO = 200
#: ... or this many bytes, whichever is larger
DEFAULT_FLOOR = 16 << 20
_FILTER_ERROR = getattr(tarfile, "FilterError", ())


class UnsafeArchiveError(DgmoeError):
    """An archive member that would write outside its folder, a device, a link out, or too many bytes; nothing of
    the archive is kept (exit 1). `.member` names it."""

    def __init__(self, archive: Path, member: str, why: str):
        super().__init__(f"refusing to unpack {archive}: member {member!r} {why}; nothing was extracted")
        self.member = member


def _kind(archive: Path) -> str:
    if zipfile.is_zipfile(archive):
        return "zip"
    try:
        with tarfile.open(archive, "r:*") as t:
            t.next()
        return "tar"
    except (tarfile.TarError, OSError, EOFError):
        return "file"


def _relative(archive: Path, name: str, root: str | None) -> str | None:
    """The member's path inside the target ('' for the root itself), None when it lies outside `members_root`;
    an absolute name or a `..` is refused."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or "\\" in name:
        raise UnsafeArchiveError(archive, name, "has an absolute or non-POSIX path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(archive, name, "climbs out of the folder with '..'")
    if root:
        top = [p for p in root.split("/") if p]
        if parts[: len(top)] != top:
            return None
        parts = parts[len(top):]
    return "/".join(parts)


def _check_link(archive: Path, name: str, rel: str, link: str, hard: bool) -> None:
    """A link must resolve inside the folder: a symbolic one relative to its own folder, a hard one to the root."""
    if link.startswith("/") or not link:
        raise UnsafeArchiveError(archive, name, f"is a link to the absolute path {link!r}")
    where = link if hard else posixpath.join(posixpath.dirname(rel), link)
    if posixpath.normpath(where).split("/")[0] == "..":
        raise UnsafeArchiveError(archive, name, f"is a link pointing out of the folder ({link!r})")


class _Budget:
    """The bytes an archive may still write (`max_bytes`), and the top folders of the members it skipped."""

    def __init__(self, archive: Path, cap: int):
        self.archive, self.cap, self.used = archive, cap, 0
        self.skipped: set[str] = set()

    def skip(self, name: str) -> None:
        self.skipped.add(name.strip("/").split("/")[0])

    def take(self, name: str, size: int) -> None:
        self.used += size
        if self.used > self.cap:
            raise UnsafeArchiveError(self.archive, name, f"takes the archive past {self.cap} bytes unpacked (a zip "
                                                         "bomb, or a larger archive than declared: pass max_bytes)")


def _zip_members(archive: Path, z: zipfile.ZipFile, root: str | None, budget: _Budget) -> Iterator[tuple]:
    for info in z.infolist():
        rel = _relative(archive, info.filename, root)
        if rel is None:
            budget.skip(info.filename)
            continue
        mode = info.external_attr >> 16
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise UnsafeArchiveError(archive, info.filename, "is a device file, FIFO or socket")
        if info.flag_bits & 0x1:
            raise UnsafeArchiveError(archive, info.filename, "is encrypted")
        if stat.S_ISLNK(mode):
            _check_link(archive, info.filename, rel, z.read(info).decode("utf-8", "replace"), hard=False)
        budget.take(info.filename, info.file_size)
        yield info, rel, mode


def _unzip(archive: Path, into: Path, root: str | None, budget: _Budget) -> int:
    count = 0
    with zipfile.ZipFile(archive) as z:
        members = list(_zip_members(archive, z, root, budget))  # every member checked before one is written
        check_space(into.parent, budget.used, f"unpacking {archive.name}")
        for info, rel, mode in members:
            if not rel:
                continue
            if stat.S_ISLNK(mode):
                (into / rel).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(z.read(info).decode(), into / rel)
            else:  # zipfile inflates no more than the declared size and checks the CRC
                info.filename = rel + ("/" if info.is_dir() else "")
                z.extract(info, into)
            count += 1
    return count


def _untar(archive: Path, into: Path, root: str | None, budget: _Budget) -> int:
    """Stream the tar once: each member checked, then extracted (a compressed tar is never decompressed twice)."""
    count = 0
    data = getattr(tarfile, "data_filter", None)
    with tarfile.open(archive, "r|*") as t:
        for member in t:
            rel = _relative(archive, member.name, root)
            if rel is None:
                budget.skip(member.name)
                continue
            if member.isdev() or member.isfifo() or not (member.isreg() or member.isdir() or member.issym()
                                                         or member.islnk()):
                raise UnsafeArchiveError(archive, member.name, "is a device file, FIFO or other special file")
            if member.issym():
                _check_link(archive, member.name, rel, member.linkname, hard=False)
            elif member.islnk():  # named from the archive's root
                _check_link(archive, member.name, rel, member.linkname, hard=True)
                link = _relative(archive, posixpath.normpath(member.linkname), root)
                if not link:
                    raise UnsafeArchiveError(archive, member.name, "is a hard link to a member outside members_root")
                member.linkname = link
            budget.take(member.name, member.size)
            if not rel:
                continue
            member.name = rel
            # a folder keeps a writable mode until its members are in (as extractall does)
            if data is not None:
                t.extract(member, into, set_attrs=not member.isdir(), filter=data)
            else:  # a Python without extraction filters: the checks above are the only ones
                t.extract(member, into, set_attrs=not member.isdir())
            count += 1
    return count


def _archive_error(archive: Path, error: Exception) -> DgmoeError:
    return UsageError(f"{archive} is not a readable archive ({error}); delete it and download it again")


def unpack(archive: Path, target: Path, *, max_bytes: int | None = None, members_root: str | None = None,
           replace: bool = False) -> Path:
    """Extract `archive` as the folder `target` (see the module docstring) and return `target`. `max_bytes`: the
    most bytes it may write (default: `DEFAULT_RATIO` times its size, at least `DEFAULT_FLOOR`); `members_root`:
    the folder inside the archive that becomes `target` (members elsewhere are skipped); `replace`: swap out an
    existing `target` (atomically), otherwise refused."""
    archive, target = Path(archive), Path(target)
    if not archive.is_file():
        raise UsageError(f"{archive}: no such archive file")
    if target.exists() and not replace:
        raise UsageError(f"{target} already exists; --force replaces it (atomically, once the new one is complete)")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_folders(target.parent)
    cap = max_bytes if max_bytes is not None else max(DEFAULT_FLOOR, DEFAULT_RATIO * archive.stat().st_size)
    budget = _Budget(archive, cap)
    kind = _kind(archive)
    root = members_root.strip("/") if members_root else None
    with atomic_folder(target) as into:
        try:
            if kind == "zip":
                count = _unzip(archive, into, root, budget)
            elif kind == "tar":
                count = _untar(archive, into, root, budget)
            else:
                budget.take(archive.name, archive.stat().st_size)
                shutil.copyfile(archive, into / archive.name)
                count = 1
        except _FILTER_ERROR as e:  # what Python's own filter refused that ours let through
            raise UnsafeArchiveError(archive, getattr(getattr(e, "tarinfo", None), "name", "?"), str(e)) from None
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, RuntimeError) as e:
            raise _archive_error(archive, e) from None
        except OSError as e:
            if not isinstance(e, DgmoeError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(errno.ENOSPC, f"disk full while unpacking {archive} into {target}; nothing was "
                                                  "kept: free some space and re-run") from None
            raise
        if root and count == 0:
            tops = ", ".join(sorted(budget.skipped)[:8]) or "none"
            raise UsageError(f"{archive} has nothing under {root}/ (members_root); its layout is not the declared one "
                             f"(its top-level names: {tops})")
    return target
