"""WiSE-FT interpolates from the zero-shot weights theta_0 a run was fine-tuned from: the classifier head (its
kind, prompt templates, class names and text tower) is part of that shared starting point, recorded by each run
when it starts. A fine-tuned run with other templates or a linear head is refused in one line naming the field
and both values, before anything is written; runs recorded before the head was are judged by their config."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dgmoe.cli import run
from dgmoe.posthoc.members import Member, head_difference

BASE = ["--dataset", "Debug28", "--model", "vit_micro_patch7_clip_28", "--progress", "none", "--num-threads", "1",
        "--checkpoint-freq", "1", "--seed", "5", "--hparams", '{"batch_size": 4}']
ZEROSHOT = ["--head", "zeroshot", "--prompt-templates", "domainbed"]
FINE_TUNED = {"same": ZEROSHOT, "templates": ["--head", "zeroshot", "--prompt-templates", "openai_imagenet"],
              "linear": ["--head", "linear"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wise_head")
    assert run(["train", *BASE, *ZEROSHOT, "--steps", "0", "--output-dir", str(root / "zs")]) == 0
    for name, head in FINE_TUNED.items():
        assert run(["train", *BASE, *head, "--steps", "1", "--output-dir", str(root / name)]) == 0, name
    return root


def _sweep(runs: Path, tmp_path: Path, fine_tuned: str, recorded: bool = True) -> Path:
    """A folder holding the zero-shot run and one fine-tuned run (without the recorded heads: as older runs)."""
    for name in ("zs", fine_tuned):
        shutil.copytree(runs / name, tmp_path / "runs" / name)
        if not recorded:
            path = tmp_path / "runs" / name / "config.json"
            config = json.loads(path.read_text())
            del config["head"]
            path.write_text(json.dumps(config))
    return tmp_path / "runs"


def _soup(root: Path, capsys) -> tuple[int, str]:
    code = run(["soup", str(root), "--method", "wise-ft", "--zero-shot", str(root / "zs"), "--alpha", "0,1",
                "--weights", "last"])
    return code, capsys.readouterr().err.strip()


def test_each_run_records_the_head_it_starts_from(runs):
    heads = {name: json.loads((runs / name / "config.json").read_text())["head"] for name in ("zs", *FINE_TUNED)}
    assert heads["zs"] == heads["same"] == {
        "kind": "zeroshot", "templates": "domainbed", "class_names": heads["zs"]["class_names"],
        "text_tower": "seeded random text tower, seed 5"}
    assert len(heads["zs"]["class_names"]) == 2  # (Debug28's two classes)
    assert heads["templates"]["templates"] == "openai_imagenet" and heads["linear"] == {"kind": "linear"}


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "older-runs"])
@pytest.mark.parametrize("fine_tuned,named", [
    ("templates", "--prompt-templates domainbed vs openai_imagenet"),
    ("linear", "--head zeroshot vs linear"),
])
def test_a_run_fine_tuned_from_another_head_is_refused_naming_the_field(runs, tmp_path, capsys, fine_tuned, named,
                                                                         recorded):
    root = _sweep(runs, tmp_path, fine_tuned, recorded)
    code, err = _soup(root, capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"dgmoe: error: --zero-shot {root / 'zs'}: {root / fine_tuned} was not fine-tuned from its "
                          f"zero-shot head ({named})"), err
    assert not (root / "soups").exists()


def test_a_run_fine_tuned_from_the_zero_shot_head_is_interpolated(runs, tmp_path, capsys):
    root = _sweep(runs, tmp_path, "same")
    code, err = _soup(root, capsys)
    assert code == 0, err
    assert len([f for f in (root / "soups").iterdir() if f.name.startswith("wise-ft")]) == 3


def _member(head: dict) -> Member:
    return Member(Path("r"), {"head": head}, Path("w"))


@pytest.mark.parametrize("other,named", [
    ({"text_tower": "b.safetensors (sha256 222222222222)"},
     "text tower (--text-pretrained, else --pretrained) a.safetensors (sha256 111111111111) vs b.safetensors "
     "(sha256 222222222222)"),
    ({"class_names": ["dog", "horse"]}, "class names: class 1 'cat' vs 'horse'"),
    ({"class_names": ["dog"]}, "class names: 2 vs 1"),
    ({"templates": "mine.txt (sha256 333333333333)"}, "--prompt-templates domainbed vs mine.txt (sha256 333333333333)"),
])
def test_every_field_of_the_head_is_compared(other, named):
    head = {"kind": "zeroshot", "templates": "domainbed", "class_names": ["dog", "cat"],
            "text_tower": "a.safetensors (sha256 111111111111)"}
    assert head_difference(_member(head), _member(head)) is None
    assert head_difference(_member(head), _member({**head, **other})) == named


def test_a_weight_average_of_runs_from_two_heads_is_refused(runs, tmp_path, capsys):
    for name in ("same", "templates"):  # one cell (ERM, one model, one trial), two prompt template sets
        shutil.copytree(runs / name, tmp_path / "runs" / name)
    code = run(["soup", str(tmp_path / "runs"), "--method", "uniform", "--weights", "last"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "did not start from the same classifier head (--prompt-templates domainbed vs openai_imagenet)" in err
    assert not (tmp_path / "runs" / "soups").exists()
