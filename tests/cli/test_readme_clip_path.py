"""README's "CLIP in three commands" is valid for this version's command line: each `dgmoe` command in it parses
(every flag and value accepted) and gets as far as its first input, the weights file the user has yet to make."""
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def clip_commands() -> list[list[str]]:
    section = README.read_text().split("## CLIP in three commands")[1].split("\n## ")[0]
    block = section.split("```bash")[1].split("```")[0].replace("\\\n", " ")
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("dgmoe ")]


def test_the_section_holds_the_three_steps():
    assert [c[0] for c in clip_commands()] == ["train", "train", "soup", "results"]


@pytest.mark.parametrize("index", [0, 1])
def test_each_train_command_parses_and_stops_only_at_the_missing_weights(cli, tmp_path, monkeypatch, index):
    monkeypatch.chdir(tmp_path)
    args = clip_commands()[index]
    (tmp_path / "DATA").mkdir()
    result = cli(*args)
    assert result.exit_code == 2 and "checkpoint file not found: clip_vit_b16.pt" in result.output, result.output
    assert not (tmp_path / "runs").exists()


def test_the_soup_command_parses_and_finds_no_finished_run_in_an_empty_folder(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = clip_commands()[2]
    (tmp_path / "runs" / "clip" / "ft").mkdir(parents=True)
    (tmp_path / "runs" / "clip" / "zs").mkdir(parents=True)
    result = cli(*args)
    assert "no such option" not in result.output.lower() and "invalid value" not in result.output.lower()
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
