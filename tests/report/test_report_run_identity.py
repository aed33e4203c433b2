"""Runs that computed different things are rows of their own in `dgmoe results`, never duplicates: a zero-shot
run (`--steps 0`), a fine-tune from it, a zero-shot run with another `--text-pretrained`, one without weights
and one on another `--n-per-domain` of one (dataset, algorithm, model) are five rows, each named by the facts
that tell it apart; two copies of one run (same identity) are reduced to one, with a warning naming the copy."""
import json
from pathlib import Path

import pytest

from dgmoe.engine.config import RunConfig
from dgmoe.report.collect import load_records

DOMAINS = ["art_painting", "cartoon", "photo", "sketch"]
MODEL = "vit_micro_patch7_28"
CLIP = "clip.safetensors (sha256 0123456789ab)"


def _run(folder: Path, test_acc: float, steps: int = 0, init: str = CLIP, **flags) -> Path:
    """A finished zero-shot-headed run on PACS holding out art_painting whose selected test accuracy is
    `test_acc`, started from `init` (what config.json records of its image weights)."""
    folder.mkdir(parents=True)
    args = {**RunConfig().flat(), "dataset": "PACS", "model": MODEL, "head": "zeroshot", "test_envs": [0],
            "domains": DOMAINS, "steps": steps, "checkpoint_freq": max(steps, 1), "output_dir": str(folder),
            "pretrained": None if init.startswith("random") else "/weights/clip.safetensors", **flags}
    lines = []
    for step in sorted({0, max(steps - 1, 0)}):
        record = {"step": step, "env0_in_acc": test_acc, "env0_out_acc": test_acc}
        record.update({f"env{i}_{split}_acc": 0.5 + step / 1000 for i in (1, 2, 3) for split in ("in", "out")})
        lines.append(json.dumps({**record, "hparams": {"lr": 1e-5}, "args": args}))
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "config.json").write_text(json.dumps({"initialisation": init}))
    (folder / "done").write_text("done\n")
    return folder


@pytest.fixture
def mixed(tmp_path):
    text = tmp_path / "other_text.pt"
    text.write_bytes(b"another text tower")
    root = tmp_path / "runs"
    _run(root / "a_zero_shot", 0.11)
    _run(root / "b_fine_tuned", 0.22, steps=30)
    _run(root / "c_other_text", 0.33, text_pretrained=str(text))
    _run(root / "d_no_weights", 0.44, init="random init, seed 0")
    _run(root / "e_subsample", 0.55, n_per_domain=50)
    return root


def _rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"| ERM / {MODEL}")]


def test_runs_that_computed_different_things_are_rows_of_their_own(mixed, cli):
    result = cli("results", mixed, "--no-save", "--selection", "iid")
    assert result.exit_code == 0, result.output
    assert "duplicate" not in result.output and "several run dirs" not in result.output
    rows = _rows(result.output)
    assert len(rows) == 2 * 5, rows  # the PACS table and the Averages, a row per run
    by_number = {number: [r for r in rows[:5] if f" {number} +/- 0.0 " in r] for number in
                 ("11.0", "22.0", "33.0", "44.0", "55.0")}
    assert all(len(found) == 1 for found in by_number.values()), rows  # each run's number, in a row of its own
    assert "--steps 0" in by_number["11.0"][0] and "--steps 30" in by_number["22.0"][0]
    assert "--text-pretrained other_text.pt (sha256" in by_number["33.0"][0]
    assert "--pretrained none" in by_number["44.0"][0] and f"--pretrained {CLIP}" in by_number["11.0"][0]
    assert "--n-per-domain 50" in by_number["55.0"][0] and "--n-per-domain all" in by_number["11.0"][0]


def test_true_duplicates_are_reduced_with_a_warning_naming_them(mixed, cli):
    _run(mixed / "z_copy_of_zero_shot", 0.11)
    _run(mixed / "z_copy_of_fine_tune", 0.22, steps=30)
    result = cli("results", mixed, "--no-save", "--selection", "iid")
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.output.splitlines() if "several run dirs" in line]
    assert "2 run configurations appear in several run dirs" in warning
    assert "leave out 2 duplicate run dirs" in warning
    assert str(mixed / "z_copy_of_zero_shot") in warning and str(mixed / "z_copy_of_fine_tune") in warning
    assert len(_rows(result.output)) == 2 * 5


def test_runs_of_one_identity_keep_their_plain_name(tmp_path):
    """A sweep whose runs agree on every fact (and old run folders that record none) is named as before."""
    _run(tmp_path / "a", 0.1, steps=30)
    _run(tmp_path / "b", 0.2, steps=30, trial_seed=1)
    records = load_records(tmp_path)
    assert set(records["model"]) == {f"{MODEL}(head='zeroshot', prompt_templates='openai_imagenet')"}


def test_a_labelled_run_keeps_its_label_and_says_what_sets_it_apart(tmp_path):
    _run(tmp_path / "a", 0.1, label="clip-zs")
    _run(tmp_path / "b", 0.2, steps=30, label="clip-zs")
    records = load_records(tmp_path)
    assert sorted(set(records["label"])) == ["clip-zs [--steps 0]", "clip-zs [--steps 30]"]


def test_the_report_index_groups_them_apart(mixed, cli):
    result = cli("report", mixed, "--no-params", "--out", mixed.parent / "report")
    assert result.exit_code == 0, result.output
    page = (mixed.parent / "report" / "index.html").read_text()
    for fact in ("--steps 0, ", "--steps 30, ", "--n-per-domain 50", "--pretrained none", "other_text.pt (sha256"):
        assert fact in page, fact
    assert len(list((mixed.parent / "report" / "groups").glob("*.html"))) == 5


def test_end_to_end_zero_shot_fine_tune_and_subsample_are_three_rows(tmp_path, cli):
    """Real runs of the micro CLIP stand-in: a zero-shot evaluation, a fine-tune of the same head and a zero-shot
    evaluation on a subsample were one row before (two of them "duplicate run dirs", the fine-tune's number
    shown)."""
    micro = ["--dataset", "Debug28", "--model", "vit_micro_patch7_clip_quickgelu_28", "--head", "zeroshot",
             "--test-envs", "0", "--progress", "none", "--num-threads", "1"]
    for name, flags in (("zs", ["--steps", "0"]), ("ft", ["--steps", "4", "--checkpoint-freq", "2"]),
                        ("zs_small", ["--steps", "0", "--n-per-domain", "16"])):
        result = cli("train", *micro, *flags, "--output-dir", tmp_path / "runs" / name)
        assert result.exit_code == 0, result.output
    result = cli("results", tmp_path / "runs", "--no-save", "--selection", "iid")
    assert result.exit_code == 0, result.output
    assert "duplicate" not in result.output
    rows = [line for line in result.output.split("### Averages")[0].splitlines() if line.startswith("| ERM / ")]
    assert len(rows) == 3, rows
    assert sorted(r.split("[", 1)[1].split("]")[0] for r in rows) == [
        "--steps 0, --n-per-domain 16", "--steps 0, --n-per-domain all", "--steps 4, --n-per-domain all"]


def test_facts_an_old_record_lacks_read_as_their_defaults(tmp_path):
    """A record without `holdout_fraction` (older dgmoe, DomainBed) is the default split, not another run."""
    _run(tmp_path / "old", 0.1)
    _run(tmp_path / "new", 0.2, trial_seed=1)
    lines = (tmp_path / "old" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        del record["args"]["holdout_fraction"]
    (tmp_path / "old" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert len(set(load_records(tmp_path)["model"])) == 1


def test_weights_resampled_another_way_are_another_row(tmp_path):
    _run(tmp_path / "a", 0.1)
    _run(tmp_path / "b", 0.2, pretrained_antialias=False)
    names = {name.split(" [", 1)[1] for name in load_records(tmp_path)["model"]}
    assert names == {f"--pretrained {CLIP}]", f"--pretrained {CLIP} --no-pretrained-antialias]"}
