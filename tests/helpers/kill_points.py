"""Kill a command at every one of its write points, as SIGKILL would, and re-run it.

Every write of dgmoe's atomic writer (`dgmoe.atomic`) ends in an `os.replace` (a file's temporary taking its
place, a temporary folder taking a folder's) or a `shutil.rmtree` (a temporary or replaced folder deleted). A kill
at point k copies the output folder as it is on disk just before the k-th such call under it (what SIGKILL would
leave: temporaries included) and stops the command with an exception nothing handles; the copy is then put back
in place of whatever the exception's unwinding changed, and the command runs again.

Writes of bytes are write points too, killed inside: the bytes dgmoe writes into a temporary file
(`dgmoe.atomic._write_all`) and any file the installed safetensors writes itself (`safetensors.torch.
serialize_file`, behind `save_file`, which writes through a temporary file of its own). At such a point the real
write runs in a forked child whose file-size limit is half the file: the kernel kills it (SIGXFSZ) in the middle
of the write, between its temporary file's creation and its rename, and the folder holds what a SIGKILL there
would leave.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
from pathlib import Path
from typing import Callable

import safetensors.torch

import dgmoe.atomic

_replace, _rmtree = os.replace, shutil.rmtree
_write_all, _serialize_file = dgmoe.atomic._write_all, safetensors.torch.serialize_file


def _under(out: Path, args) -> bool:
    return any(isinstance(a, (str, os.PathLike)) and str(out) in str(a) for a in args)


def _half(original, args, kw) -> int:
    """How many bytes half the file `original(*args, **kw)` writes is."""
    if original is _write_all:
        return len(args[1]) // 2
    return len(safetensors.torch.serialize(args[0], metadata=kw.get("metadata", args[2] if len(args) > 2 else None)))\
        // 2


def killed_inside(original, args, kw) -> None:
    """Run the write `original(*args, **kw)` in a child process the kernel kills half-way through it."""
    pid = os.fork()
    if pid == 0:  # the child: no core file, the default action of SIGXFSZ (Python ignores it), half the file
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            limit = max(1, _half(original, args, kw))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            original(*args, **kw)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXFSZ, f"the write was not killed: {status}"


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

    def point(original, inside=False):
        def wrapped(*args, **kw):
            if _under(out, args):
                calls.append(1)
                if len(calls) - 1 == index:
                    if inside:
                        killed_inside(original, args, kw)
                    if out.exists():
                        shutil.copytree(out, snapshot, symlinks=True)
                    raise Killed
            return original(*args, **kw)
        return wrapped

    patches = [(os, "replace", _replace, False), (shutil, "rmtree", _rmtree, False),
               (dgmoe.atomic, "_write_all", _write_all, True),
               (safetensors.torch, "serialize_file", _serialize_file, True)]
    for owner, name, original, inside in patches:
        monkeypatch.setattr(owner, name, point(original, inside))
    try:
        command()
    except Killed:
        return True
    finally:
        for owner, name, original, _ in patches:
            monkeypatch.setattr(owner, name, original)
    return False


def kill_everywhere(monkeypatch, out: Path, scratch: Path, begin: Callable[[], object], command: Callable[[], object],
                    whole: Callable[[Path], None], ignore: tuple[str, ...] = (), hidden: tuple[str, ...] = (),
                    same: Callable[[Path], object] = lambda out: None) -> int:
    """For every write point k of `command` (after `begin` set the scene): kill it at k, check that what a reader
    sees is whole (`whole(out)`), re-run it and check that `out` equals an uninterrupted run's: the same files,
    with the same contents except those named in `ignore`, whose `same(out)` must be equal instead (records
    without their timings). Returns the number of write points. `hidden`: the hidden files the uninterrupted run
    itself keeps (a lock file)."""
    begin()
    command()
    reference, expected = folder_state(out, ignore), same(out)
    assert reference and not any(part.startswith(".") and part not in hidden for name in reference
                                 for part in Path(name).parts)
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
        assert same(out) == expected, f"killed at write point {index}"
        index += 1
