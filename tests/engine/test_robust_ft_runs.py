"""The robust fine-tuning baselines end to end on a CLIP-shaped micro tower with its micro text tower: a zero-shot
run, LP-FT, FLYP and CLIPood through `dgmoe train`, WiSE-FT of each against the zero-shot run through `dgmoe
soup`, then `results` and `report`; WiSE-FT at alpha 0 is the zero-shot run and at alpha 1 each fine-tuned run,
exactly (every recorded accuracy and loss)."""
import json

import pytest

from dgmoe.cli import run
from dgmoe.engine.io import read_jsonl

BASE = ["--dataset", "Debug28", "--model", "vit_micro_patch7_clip_28", "--head", "zeroshot", "--prompt-templates",
        "domainbed", "--progress", "none", "--num-threads", "1", "--checkpoint-freq", "1", "--seed", "5"]
RUNS = {"zs": ("ERM", 0, {}), "lpft": ("LPFT", 3, {"linear_steps": 1}), "flyp": ("FLYP", 3, {}),
        "clipood": ("CLIPood", 3, {})}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust") / "runs"
    for name, (algorithm, steps, hparams) in RUNS.items():
        assert run(["train", *BASE, "--algorithm", algorithm, "--steps", str(steps), "--output-dir", str(root / name),
                    "--hparams", json.dumps({"batch_size": 4, "lr": 1e-3, **hparams})]) == 0, name
    assert run(["soup", str(root), "--method", "wise-ft", "--zero-shot", str(root / "zs"), "--alpha", "0,0.5,1",
                "--weights", "last"]) == 0
    return root


def _metrics(record):
    return {k: v for k, v in record.items() if k.startswith("env") and k.endswith(("_acc", "_loss"))}


@pytest.mark.parametrize("name", ["lpft", "flyp", "clipood"])
def test_wise_ft_ends_are_the_zero_shot_and_the_fine_tuned_runs(runs, name):
    algorithm = RUNS[name][0]
    soups = {json.loads((f / "config.json").read_text())["soup"].get("alpha"): read_jsonl(f / "results.jsonl")[0]
             for f in (runs / "soups").iterdir() if f.name.startswith("wise-ft") and f"_{algorithm}_" in f.name
             and json.loads((f / "config.json").read_text())["soup"]["fine_tuned"] == str(runs / name)}
    zero_shot, fine_tuned = read_jsonl(runs / "zs" / "results.jsonl")[-1], read_jsonl(runs / name / "results.jsonl")[-1]
    assert _metrics(soups[0.0]) == _metrics(zero_shot)
    assert _metrics(soups[1.0]) == _metrics(fine_tuned)
    assert _metrics(zero_shot) != _metrics(fine_tuned)  # the runs differ: the test can fail


def test_results_and_report_list_every_run_and_the_curve(runs, capsys):
    assert run(["results", str(runs), "--no-save", "--selection", "oracle"]) == 0
    out = capsys.readouterr().out
    for row in ("LPFT", "FLYP", "CLIPood", "LPFT (WiSE-FT alpha=0.5, last weights)", "FLYP (WiSE-FT, last weights)",
                "CLIPood (WiSE-FT alpha=1, last weights)"):
        assert f"| {row}" in out, row
    assert run(["report", str(runs), "--no-params", "--pages", "none"]) == 0
    assert (runs / "report" / "index.html").exists()
