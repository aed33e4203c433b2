"""Kill a command at every one of its write points, as SIGKILL would, and re-run it.

Every write of dgmoe's atomic helpers (`dgmoe.engine.io`) ends in an `os.replace` (a file's temporary taking its
place, a temporary folder taking a folder's) or a `shutil.rmtree` (a temporary or replaced folder deleted). A kill
at point k copies the output folder as it is on disk just before the k-th such call under it (what SIGKILL would
leave: temporaries included) and stops the command with an exception nothing handles; the copy is then put back
in place of whatever the exception's unwinding changed, and the command runs again.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

_replace, _rmtree = os.replace, shutil.rmtree


class Killed(BaseException):
    """Stands for SIGKILL: nothing in dgmoe handles it."""


def weights_state(path: Path) -> bytes:
    """A weights file's metadata and tensors (safetensors writes its metadata in no fixed order)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = sorted((f.metadata() or {}).items())
        return repr(meta).encode() + b"".join(k.encode() + f.get_tensor(k).numpy().tobytes() for k in sorted(f.keys()))


def folder_state(out: Path, ignore: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under `out` (hidden ones included) by relative path; files named in `ignore` (a time of making)
    as empty."""
    if not out.exists():
        return {}
    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        name = str(path.relative_to(out))
        files[name] = (b"" if path.name in ignore else weights_state(path) if path.suffix == ".safetensors"
                       else path.read_bytes())
    return files


def run_killed_at(monkeypatch, out: Path, index: int, snapshot: Path, command: Callable[[], object]) -> bool:
    """Run `command`, killed just before its `index`-th write point under `out` (the folder then copied to
    `snapshot`); False when it has fewer."""
    calls = []

    def point(original):
        def wrapped(*args, **kw):
            if any(str(out) in str(a) for a in args):
                calls.append(1)
                if len(calls) - 1 == index:
                    if out.exists():
                        shutil.copytree(out, snapshot, symlinks=True)
                    raise Killed
            return original(*args, **kw)
        return wrapped

    monkeypatch.setattr(os, "replace", point(_replace))
    monkeypatch.setattr(shutil, "rmtree", point(_rmtree))
    try:
        command()
    except Killed:
        return True
    finally:
        monkeypatch.setattr(os, "replace", _replace)
        monkeypatch.setattr(shutil, "rmtree", _rmtree)
    return False


def kill_everywhere(monkeypatch, out: Path, scratch: Path, begin: Callable[[], object], command: Callable[[], object],
                    whole: Callable[[Path], None], ignore: tuple[str, ...] = ()) -> int:
    """For every write point k of `command` (after `begin` set the scene): kill it at k, check that what a reader
    sees is whole (`whole(out)`), re-run it and check that `out` equals an uninterrupted run's. Returns the number
    of write points."""
    begin()
    command()
    reference = folder_state(out, ignore)
    assert reference and not any(part.startswith(".") for name in reference for part in Path(name).parts)
    index = 0
    while True:
        begin()
        snapshot = scratch / f"kill{index}"
        if not run_killed_at(monkeypatch, out, index, snapshot, command):
            return index
        _rmtree(out, ignore_errors=True)
        if snapshot.exists():
            shutil.copytree(snapshot, out, symlinks=True)
        whole(out)
        command()
        assert folder_state(out, ignore) == reference, f"killed at write point {index}"
        index += 1
