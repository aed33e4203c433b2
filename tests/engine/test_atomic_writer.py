"""dgmoe's one atomic writer (`dgmoe.atomic`): no module writes a whole file any other way, weights included
(the installed safetensors' own `save_file` writes through a temporary file of its own, which a kill leaves
where dgmoe's cleanup did not look), and what a kill inside a write leaves is removed by the cleanup."""
from __future__ import annotations

import ast
from pathlib import Path

import torch
from kill_points import run_killed_at
from safetensors.torch import load_file, save_file

from dgmoe.atomic import SAFETENSORS_TEMP, remove_stale_temporaries, save_safetensors_atomic, stale_temporaries

SRC = Path(__file__).resolve().parents[2] / "src" / "dgmoe"
#: the writes that are not whole files: logs that grow line by line, a job's claim created exclusively, a
#: download's `.part`, which grows as its bytes arrive (resumable) and is renamed into place once its checksum
#: matched, and an install's renames (a rejected archive moved aside, a staged folder's entries moved into place)
APPENDED = {("engine/runlog.py", "open"), ("sweep/runner.py", "open"), ("sweep/state.py", "fdopen"),
            ("data/fetch.py", "open"), ("data/fetch.py", "replace"), ("data/install.py", "replace")}
#: where a write may go: the temporary file of `atomic_path`, or bytes in memory that the atomic writer then writes
TARGETS = {"tmp", "buffer", "buf"}
TENSORS = {"w": torch.arange(50_000, dtype=torch.float32).reshape(100, 500), "b": torch.ones(7)}


def _writes(tree: ast.AST):
    """(name, target) of each call that writes a file: its name and where it writes (a Name's id, else ''; a
    rename's target is always '': renaming a temporary over a file is the atomic writer's)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, args = node.func, node.args
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name in ("open", "fdopen"):
            mode = args[1] if len(args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if not (isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+")):
                continue
            target = args[0] if args else None
        elif name in ("write_text", "write_bytes", "rename", "savefig", "to_csv") and isinstance(func, ast.Attribute):
            if name == "to_csv" and not args:
                continue  # to a string
            target = None if name == "rename" else func.value if name != "savefig" and name != "to_csv" else args[0]
        elif (owner, name) in {("os", "replace"), ("torch", "save"), ("np", "save"), ("np", "savez"), ("json", "dump"),
                               ("pickle", "dump")} or name == "save_file":
            target = None if name == "replace" else args[1] if owner in ("torch", "json", "pickle") or \
                name == "save_file" else args[0]
        else:
            continue
        yield name, target.id if isinstance(target, ast.Name) else ""


def test_every_file_is_written_through_the_atomic_writer():
    found = set()
    for path in SRC.rglob("*.py"):
        rel = str(path.relative_to(SRC))
        if rel == "atomic.py":
            continue
        for name, target in _writes(ast.parse(path.read_text())):
            if target not in TARGETS:
                found.add((rel, name))
    assert found == APPENDED, sorted(found - APPENDED)


def test_the_installed_safetensors_writer_killed_inside_leaves_its_own_temporary(tmp_path, monkeypatch):
    """What `save_file` leaves (the defect that made dgmoe serialise weights itself): the cleanup knows it."""
    out = tmp_path / "run"
    out.mkdir()
    assert run_killed_at(monkeypatch, out, 0, tmp_path / "left", lambda: save_file(TENSORS, str(out / "w.safetensors")))
    left = sorted(p.name for p in (tmp_path / "left").iterdir())
    assert len(left) == 1 and SAFETENSORS_TEMP.fullmatch(left[0]), left
    assert [p.name for p in remove_stale_temporaries(tmp_path / "left")] == left
    assert not list((tmp_path / "left").iterdir())


def test_weights_killed_inside_their_write_leave_only_a_temporary_the_cleanup_removes(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    assert run_killed_at(monkeypatch, out, 0, tmp_path / "left",
                         lambda: save_safetensors_atomic(out / "w.safetensors", TENSORS))
    (left,) = (tmp_path / "left").iterdir()
    assert left.name.startswith(".w.safetensors.") and 0 < left.stat().st_size < 200_000  # half written
    assert stale_temporaries(tmp_path / "left") == [left]
    save_safetensors_atomic(out / "w.safetensors", TENSORS)
    assert [p.name for p in out.iterdir()] == ["w.safetensors"]
    assert all(torch.equal(load_file(str(out / "w.safetensors"))[k], v) for k, v in TENSORS.items())


def test_a_folder_not_dgmoe_own_loses_only_the_temporaries_of_the_files_named(tmp_path):
    for name in (".adapter_model.safetensors.x1.tmp", ".notes.txt.x2.tmp", ".tmpAbC123"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in remove_stale_temporaries(tmp_path, names=("adapter_model.safetensors",))] == [
        ".adapter_model.safetensors.x1.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.txt.x2.tmp", ".tmpAbC123"]
