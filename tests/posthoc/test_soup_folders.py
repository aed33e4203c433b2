"""Which run folders `dgmoe soup` sees: a folder the user cannot list is refused (or, with --partial, named in
the soup's record), never averaged away; an unreadable weights file says "permission denied"; symbolic links to
run folders are followed, each folder once, and a loop or a link to nothing is named.

The permission cases run as a user without the right to read another user's files: as that user when the tests
run unprivileged, else (root) through `setpriv`, which drops the capabilities that let root read anything. They
are skipped, with the reason, where neither can be arranged."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers.soup_sweep import TINY

from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import read_jsonl
from dgmoe.engine.trainer import train

NOBODY = 65534
DROP = "-dac_override,-dac_read_search"


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("soup_folders") / "run"
    train(RunConfig.from_flat({**TINY, "dataset": "RotatedMNIST", "model": "vit_micro_patch7_28",
                               "test_envs": [0], "output_dir": str(out)}))
    return out


@pytest.fixture
def shared_tmp():
    """A folder another user may enter (pytest's own tmp folders are private to the user running the tests)."""
    folder = Path(tempfile.mkdtemp(prefix="dgmoe-perm-"))
    folder.chmod(0o755)
    yield folder
    for path, dirs, _ in os.walk(folder):  # give the folders back to us to remove them
        for d in dirs:
            os.chmod(os.path.join(path, d), 0o755)
    shutil.rmtree(folder, ignore_errors=True)


def _unprivileged(args: list[str]) -> subprocess.CompletedProcess:
    """`python -m dgmoe ARGS` as a user that cannot read what its permissions forbid."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot run dgmoe as a user without root's read rights")
        prefix = [setpriv, "--bounding-set", DROP, "--inh-caps", DROP]
    return subprocess.run([*prefix, sys.executable, "-m", "dgmoe", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=300)


def _theirs(folder: Path) -> None:
    """`folder` as another user's copy made under `umask 077` (root: owned by nobody; a user: mode 000)."""
    if os.geteuid() == 0:
        for path, dirs, files in os.walk(folder):
            for name in [*dirs, *files]:
                os.chown(os.path.join(path, name), NOBODY, NOBODY)
        os.chown(folder, NOBODY, NOBODY)
        folder.chmod(0o700)
    else:
        folder.chmod(0)


def _cell(root: Path, run: Path, names=("a", "b", "c")) -> None:
    for name in names:
        shutil.copytree(run, root / "runs" / name)


def test_a_folder_the_user_cannot_list_is_refused_not_averaged_away(one_run, shared_tmp):
    _cell(shared_tmp, one_run)
    _theirs(shared_tmp / "runs" / "c")
    result = _unprivileged(["soup", str(shared_tmp / "runs"), "--method", "uniform", "--out", str(shared_tmp / "o")])
    assert result.returncode == 2, result.stdout + result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dgmoe: error: ") and "Traceback" not in err, err
    assert f"{shared_tmp / 'runs' / 'c'} (cannot be listed: permission denied; its runs cannot be read)" in err, err
    assert not (shared_tmp / "o").exists()


def test_with_partial_the_record_names_the_folder_it_could_not_list(one_run, shared_tmp):
    _cell(shared_tmp, one_run)
    _theirs(shared_tmp / "runs" / "c")
    result = _unprivileged(["soup", str(shared_tmp / "runs"), "--method", "uniform", "--out", str(shared_tmp / "o"),
                            "--partial"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "uniform: 2 runs, partial: 1 run(s) left out" in result.stderr, result.stderr
    (folder,) = (shared_tmp / "o").iterdir()
    (record,) = read_jsonl(folder / "results.jsonl")
    assert record["args"]["algorithm"] == "ERM (uniform soup, partial)"  # its row says so
    partial = record["args"]["soup"]["partial"]
    assert [p["run"] for p in partial] == [str(shared_tmp / "runs" / "c")]
    assert "permission denied" in partial[0]["reason"]


def test_an_unreadable_weights_file_says_permission_denied(one_run, shared_tmp):
    _cell(shared_tmp, one_run, ("a", "b"))
    weights = shared_tmp / "runs" / "b" / "best.safetensors"
    weights.chmod(0)
    if os.geteuid() != 0 and os.access(weights, os.R_OK):
        pytest.skip("this file system ignores file modes")
    result = _unprivileged(["soup", str(shared_tmp / "runs"), "--method", "uniform", "--out", str(shared_tmp / "o")])
    err = result.stderr.strip()
    assert result.returncode == 2 and len(err.splitlines()) == 1, result.stdout + err
    assert f"unreadable weights {weights.name} (permission denied)" in err and "No such file" not in err, err


def test_symlinked_run_folders_are_followed_once_and_loops_named(one_run, tmp_path, cli):
    elsewhere = tmp_path / "disk2"
    _cell(elsewhere, one_run, ("a", "b"))
    root = tmp_path / "gathered"
    root.mkdir()
    for name in ("a", "b"):
        (root / name).symlink_to(elsewhere / "runs" / name, target_is_directory=True)
    (root / "again").symlink_to(elsewhere / "runs" / "a", target_is_directory=True)  # one run, two links
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "gone").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    result = cli("soup", root, "--method", "uniform", "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert "holds no finished run" not in result.output
    assert "uniform: 2 runs ->" in result.output, result.output
    for name, why in (("again", "read once already"), ("loop", "read once already"), ("gone", "does not exist")):
        assert any(line.startswith("warning: not followed: ") and str(root / name) in line and why in line
                   for line in result.output.splitlines()), (name, result.output)
    (folder,) = (tmp_path / "o").iterdir()
    (record,) = read_jsonl(folder / "results.jsonl")
    assert sorted(Path(m).name for m in record["args"]["soup"]["members"]) == ["a", "b"]


def test_a_symlinked_weights_cell_is_not_left_out_as_missing(one_run, tmp_path, cli):
    """The whole cell reached through links: before links were followed, the soup said the folder "holds no
    finished run with best weights"."""
    _cell(tmp_path / "disk2", one_run, ("a", "b"))
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "runs").symlink_to(tmp_path / "disk2" / "runs", target_is_directory=True)
    result = cli("soup", tmp_path / "root", "--method", "uniform", "--out", tmp_path / "o")
    assert result.exit_code == 0 and "uniform: 2 runs ->" in result.output, result.output
    assert json.loads(next((tmp_path / "o").iterdir()).joinpath("config.json").read_text())["soup"]["method"] \
        == "uniform"
    assert stat.S_ISDIR(os.stat(tmp_path / "root" / "runs").st_mode)


@pytest.mark.parametrize("name", ["config.json", "results.jsonl"])
def test_a_run_with_an_unreadable_file_is_left_out_by_name(one_run, shared_tmp, name):
    """Refused in one line naming the file; with --partial, left out and named in the record (it stopped the
    soup with the bare OS error before)."""
    _cell(shared_tmp, one_run)
    theirs = shared_tmp / "runs" / "c" / name
    if os.geteuid() == 0:
        os.chown(theirs, NOBODY, NOBODY)
    theirs.chmod(0o600 if os.geteuid() == 0 else 0)
    args = ["soup", str(shared_tmp / "runs"), "--method", "uniform", "--out", str(shared_tmp / "o")]
    result = _unprivileged(args)
    err = result.stderr.strip()
    assert result.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, result.stdout + err
    assert f"unreadable {name} (permission denied)" in err and not (shared_tmp / "o").exists(), err
    result = _unprivileged([*args, "--partial"])
    assert result.returncode == 0 and "uniform: 2 runs, partial: 1 run(s) left out" in result.stderr, result.stderr
    (record,) = read_jsonl(next((shared_tmp / "o").iterdir()) / "results.jsonl")
    assert record["args"]["soup"]["partial"] == [{"run": str(shared_tmp / "runs" / "c"),
                                                  "reason": f"unreadable {name} (permission denied)"}]
