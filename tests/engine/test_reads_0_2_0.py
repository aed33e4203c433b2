"""Run folders and a sweep written by dgmoe 0.2.0's own code (tests/golden/written_by_0.2.0, made by its make.sh)
are read by this dgmoe: tabulated, rebuilt with their weights, souped, counted, and a re-run of their command finds
them finished and changes nothing."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dgmoe.cli import run
from dgmoe.engine.checkpoint import load_run

FIXTURE = Path(__file__).resolve().parents[1] / "golden" / "written_by_0.2.0"


@pytest.fixture
def old(tmp_path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "old")
    return tmp_path / "old"


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_fixture_was_written_by_0_2_0():
    config = json.loads((FIXTURE / "runs" / "erm_h0" / "config.json").read_text())
    assert config["provenance"]["dgmoe"] == "0.2.0"


def test_results_tabulate_0_2_0_runs_and_sweeps(old, capsys):
    assert run(["results", str(old / "runs"), "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "ERM" in out and "vit_micro_patch7_28" in out
    assert run(["results", str(old / "sweeps"), "--no-save"]) == 0
    assert run(["sweep", "status", "--output-dir", str(old / "sweeps")]) == 0
    assert "1" in capsys.readouterr().out


@pytest.mark.parametrize("which", ["best", "last"])
def test_a_0_2_0_run_rebuilds_with_its_weights(old, which):
    network, config = load_run(old / "runs" / "erm_h0", which)
    name = "best.safetensors" if which == "best" else "model.safetensors"
    saved = load_file(str(old / "runs" / "erm_h0" / name))
    assert all(torch.equal(network.state_dict()[k], v) for k, v in saved.items())
    assert network(torch.zeros(1, 1, 28, 28)).shape == (1, 10)


def test_re_running_a_0_2_0_command_finds_it_finished(old, capsys):
    folder = old / "runs" / "erm_h1"
    before = _digest(folder)
    assert run(["train", "--config", str(folder / "config.json"), "--output-dir", str(folder)]) == 0
    assert _digest(folder) == before


def test_0_2_0_runs_make_a_soup(old, tmp_path, capsys):
    assert run(["soup", str(old / "runs"), "--method", "uniform", "--out", str(tmp_path / "soups")]) == 0
    said = capsys.readouterr()
    assert "uniform: 2 runs" in said.out + said.err
    assert run(["results", str(tmp_path / "soups"), "--no-save"]) == 0
