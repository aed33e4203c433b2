"""`dgmoe soup` killed at any of its writes (`kill_points`: every file and folder move, as SIGKILL would leave
it): a reader then sees each soup folder whole or not at all, and the next run removes what the killed one left
and ends with exactly the soups of an uninterrupted run, whether it makes them or makes them again in place.
Every file of a soup's run folder is written by `RunWriter`, which owns run folders."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from kill_points import kill_everywhere

from dgmoe.engine.rundir import RunWriter
from dgmoe.engine.trainer import train
from dgmoe.posthoc.config import SoupConfig
from dgmoe.posthoc.soup import make_soups

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            steps=3, checkpoint_freq=2, num_threads=1, progress="none", test_envs=[0], seed=0, trial_seed=0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("soupkill") / "sweep"
    for k in range(3):
        train(output_dir=str(root / f"r{k}"), hparams_seed=k, **TINY)
    return root


def _visible_soups_whole(out: Path) -> None:
    for folder in (p for p in out.iterdir() if not p.name.startswith(".")) if out.exists() else ():
        names = {p.name for p in folder.iterdir()}
        needed = {"config.json", "results.jsonl", "done"} | ({"model.safetensors"} if "ensemble" not in folder.name
                                                             else set())
        assert names == needed, (folder, names)


def _kill_everywhere(runs: Path, tmp_path: Path, monkeypatch, start: str, options: SoupConfig) -> int:
    root = tmp_path / "sweep"
    shutil.copytree(runs, root)
    out = root / "soups"

    def begin():
        shutil.rmtree(out, ignore_errors=True)
        if start == "replacing":  # a partial soup made while r2 was unfinished: the run below makes it again
            (root / "r2" / "done").rename(tmp_path / "done")
            make_soups(root, out, dataclasses.replace(options, partial=True))
            (tmp_path / "done").rename(root / "r2" / "done")

    return kill_everywhere(monkeypatch, out, tmp_path, begin, lambda: make_soups(root, out, options),
                           _visible_soups_whole, ignore=("config.json",))  # (its time of making)


@pytest.mark.parametrize("start", ["fresh", "replacing"])
def test_a_soup_killed_at_any_write_point_is_whole_or_absent_and_the_rerun_equals(runs, tmp_path, monkeypatch,
                                                                                    start):
    points = _kill_everywhere(runs, tmp_path, monkeypatch, start, SoupConfig(methods=("uniform",)))
    assert points >= (6 if start == "fresh" else 9)  # each file, the folder's moves, the temporaries' removal


@pytest.mark.slow
def test_every_soup_kind_killed_at_any_write_point(runs, tmp_path, monkeypatch):
    assert _kill_everywhere(runs, tmp_path, monkeypatch, "replacing", SoupConfig()) >= 30


def test_every_file_of_a_soup_folder_is_written_by_the_run_writer(runs, tmp_path, monkeypatch):
    root = tmp_path / "sweep"
    shutil.copytree(runs, root)
    written: dict[Path, set[str]] = {}
    original = RunWriter._write

    def recording(self, write):
        before = set(self.out.iterdir())
        original(self, write)
        written.setdefault(self.out, set()).update(p.name for p in set(self.out.iterdir()) - before)

    monkeypatch.setattr(RunWriter, "_write", recording)
    folders = make_soups(root, options=SoupConfig(methods=("uniform", "ensemble")))
    made = sorted(sorted(p.name for p in folder.iterdir()) for folder in folders)
    assert made == [["config.json", "done", "model.safetensors", "results.jsonl"], ["config.json", "done",
                                                                                    "results.jsonl"]]
    assert sorted(sorted(names) for names in written.values()) == made
