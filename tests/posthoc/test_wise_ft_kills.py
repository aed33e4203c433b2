"""`dgmoe soup --method wise-ft` killed at any of its writes (`kill_points`: every file and folder move, and
inside every write of bytes, as SIGKILL would leave it): a reader sees each soup folder whole or not at all, and
the re-run ends with exactly the soups of an uninterrupted run."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from kill_points import kill_everywhere
from shift_fixtures import write_pacs_oop

from dgmoe.engine.trainer import train
from dgmoe.posthoc.config import SoupConfig
from dgmoe.posthoc.soup import make_soups

TINY = dict(dataset="PACS", model="vit_micro_patch7_28", img_size=28, checkpoint_freq=1, seed=3,
            hparams={"batch_size": 4}, progress="none", num_threads=1, test_envs=[0])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("wisekill")
    write_pacs_oop(root / "data", per_class=1)
    for name, steps, draw in (("zs", 1, 1), ("ft", 2, 0)):  # one initialisation (--seed 3)
        train(output_dir=str(root / "runs" / name), steps=steps, hparams_seed=draw, data_dir=str(root / "data"),
              **TINY)
    return root / "runs"


def _soups_whole(out: Path) -> None:
    for folder in (p for p in out.iterdir() if not p.name.startswith(".")) if out.exists() else ():
        assert {p.name for p in folder.iterdir()} == {"config.json", "results.jsonl", "done", "model.safetensors"}


def test_a_wise_ft_soup_killed_at_any_write_point_is_whole_or_absent_and_the_rerun_equals(runs, tmp_path,
                                                                                        monkeypatch):
    out = tmp_path / "soups"
    options = SoupConfig(methods=("wise-ft",), zero_shot=str(runs / "zs"), alphas=(0.5,), which="last")
    points = kill_everywhere(monkeypatch, out, tmp_path, lambda: shutil.rmtree(out, ignore_errors=True),
                             lambda: make_soups(runs, out, options), _soups_whole,
                             ignore=("config.json",))  # (its time of making)
    assert points >= 2 * 7, points  # per soup (the alpha, the chosen one): 4 files' bytes and moves, the folder's
