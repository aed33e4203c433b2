"""`dgmoe soup` killed at any of its writes: a reader then sees each soup folder whole or not at all, and the next
run removes what the killed one left and ends with exactly the soups of an uninterrupted run.

Every write of `make_soups` ends in an `os.replace` (a file's temporary taking its place, a soup's temporary folder
taking the soup's) or a `shutil.rmtree` (a temporary or replaced folder deleted). The kill copies the soups folder
as it is on disk just before such a call (what SIGKILL would leave: temporaries included) and stops the run with
an exception nothing handles; the copy is then put back in place of whatever the exception's unwinding changed.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from dgmoe.engine.trainer import train
from dgmoe.sweep.soup import SoupOptions, make_soups

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            steps=3, checkpoint_freq=2, num_threads=1, progress="none", test_envs=[0], seed=0, trial_seed=0)
_replace, _rmtree = os.replace, shutil.rmtree


class Killed(BaseException):
    """Stands for SIGKILL: nothing in dgmoe handles it."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("soupkill") / "sweep"
    for k in range(3):
        train(output_dir=str(root / f"r{k}"), hparams_seed=k, **TINY)
    return root


def _state(out: Path) -> dict[str, bytes]:
    """Every file under `out` (hidden ones included), by relative path; config.json's time of making left out."""
    if not out.exists():
        return {}
    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        name = str(path.relative_to(out))
        files[name] = b"" if path.name == "config.json" else _weights(path) if path.suffix == ".safetensors" \
            else path.read_bytes()
    return files


def _weights(path: Path) -> bytes:
    """A weights file's metadata and tensors (safetensors writes its metadata in no fixed order)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = sorted((f.metadata() or {}).items())
        return repr(meta).encode() + b"".join(k.encode() + f.get_tensor(k).numpy().tobytes() for k in sorted(f.keys()))


def _visible_soups_whole(out: Path) -> None:
    for folder in (p for p in out.iterdir() if not p.name.startswith(".")) if out.exists() else ():
        names = {p.name for p in folder.iterdir()}
        needed = {"config.json", "results.jsonl", "done"} | ({"model.safetensors"} if "ensemble" not in folder.name
                                                             else set())
        assert names == needed, (folder, names)


def _run_killed_at(monkeypatch, root: Path, out: Path, index: int, snapshot: Path, options: SoupOptions) -> bool:
    """Run `make_soups`, killed just before its `index`-th write point; False when it has fewer."""
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
        make_soups(root, out, options)
    except Killed:
        return True
    finally:
        monkeypatch.setattr(os, "replace", _replace)
        monkeypatch.setattr(shutil, "rmtree", _rmtree)
    return False


def _kill_everywhere(root: Path, tmp_path: Path, monkeypatch, start: str, options: SoupOptions) -> int:
    out = root / "soups"

    def begin():
        _rmtree(out, ignore_errors=True)
        if start == "replacing":  # a partial soup made while r2 was unfinished: the run below makes it again
            (root / "r2" / "done").rename(tmp_path / "done")
            make_soups(root, out, dataclasses.replace(options, partial=True))
            (tmp_path / "done").rename(root / "r2" / "done")

    begin()
    make_soups(root, out, options)
    reference = _state(out)
    assert reference and not any(name.startswith(".") for name in reference)
    index = 0
    while True:
        begin()
        snapshot = tmp_path / f"kill{index}"
        if not _run_killed_at(monkeypatch, root, out, index, snapshot, options):
            return index
        _rmtree(out, ignore_errors=True)
        if snapshot.exists():
            shutil.copytree(snapshot, out, symlinks=True)
        _visible_soups_whole(out)
        make_soups(root, out, options)
        assert _state(out) == reference, f"killed at write point {index}"
        index += 1


@pytest.mark.parametrize("start", ["fresh", "replacing"])
def test_a_soup_killed_at_any_write_point_is_whole_or_absent_and_the_rerun_equals(runs, tmp_path, monkeypatch,
                                                                                    start):
    root = tmp_path / "sweep"
    shutil.copytree(runs, root)
    points = _kill_everywhere(root, tmp_path, monkeypatch, start, SoupOptions(methods=("uniform",)))
    assert points >= (6 if start == "fresh" else 9)  # each file, the folder's moves, the temporaries' removal


@pytest.mark.slow
def test_every_soup_kind_killed_at_any_write_point(runs, tmp_path, monkeypatch):
    root = tmp_path / "sweep"
    shutil.copytree(runs, root)
    assert _kill_everywhere(root, tmp_path, monkeypatch, "replacing", SoupOptions()) >= 30
