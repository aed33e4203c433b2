"""A run is what its name says, or it is refused in one line before anything is written: LP-FT fine-tunes after
its probe (the plan printed, each record naming its phase), `--peft moa` is MoA's configuration, FLYP names
the text tower it trains; a dgmoe warning is a dgmoe line; refusals that need no model answer before torch
starts. (The refusals themselves are cases of tests/engine/test_bad_input_catalogue.py and
tests/cli/test_cli_startup.py.)"""
import json
import subprocess
import sys

import pytest

from dgmoe.cli import run
from dgmoe.engine.io import read_jsonl
from dgmoe.errors import UsageError
from dgmoe.peft.config import PeftConfig
from dgmoe.settings import ConfigError

CLIP = ["--dataset", "Debug28", "--model", "vit_micro_patch7_clip_28", "--img-size", "28", "--progress", "none",
        "--num-threads", "1"]


def test_lp_ft_prints_its_plan_and_records_the_phase_of_each_checkpoint(tmp_path):
    out = tmp_path / "run"
    assert run(["train", *CLIP, "--algorithm", "LPFT", "--steps", "4", "--checkpoint-freq", "1", "--output-dir",
                str(out), "--hparams", json.dumps({"batch_size": 4, "linear_steps": 2})]) == 0
    log = (out / "train.log").read_text()
    assert "LP-FT: linear probe of the head for steps 0-1, then fine-tuning for steps 2-3" in log
    phases = [r["lp_ft_phase"] for r in read_jsonl(out / "results.jsonl")]
    assert phases == ["linear probe", "linear probe", "fine-tune", "fine-tune"]


def test_lp_ft_probe_learning_rate_is_the_recipes_linear_probe_rate_not_erm_plus_plus_warm_up():
    from dgmoe.algorithms import get_algorithm
    from dgmoe.recipes.robust_ft import PROBE_LR

    lp_ft, erm_pp = get_algorithm("LPFT").HPARAMS, get_algorithm("ERMPlusPlus").HPARAMS
    assert lp_ft["linear_lr"].default == PROBE_LR == 1e-3 and erm_pp["linear_lr"].default == 5e-5
    assert lp_ft["linear_steps"].default == erm_pp["linear_steps"].default == 500
    with pytest.raises(UsageError, match="linear_steps must be >= 1 for LPFT"):
        lp_ft["linear_steps"].validate("linear_steps", 0)
    erm_pp["linear_steps"].validate("linear_steps", -1)  # (ERM++'s own: DomainBed's, unchanged)


def test_the_smoke_scale_lp_ft_part_fine_tunes_after_its_probe():
    from dgmoe.engine.combinations import check_combination
    from dgmoe.recipes import get_recipe
    from dgmoe.recipes.plan import smoke_settings

    flat = smoke_settings(get_recipe("clip-robust-domainbed").part("lp-ft"))
    assert flat["hparams"]["linear_steps"] == 1 and flat["steps"] == 2
    check_combination("LPFT", flat["steps"], flat.get("peft", "full"), flat["hparams"])
    assert "linear_steps" not in smoke_settings(get_recipe("clip-robust-domainbed").part("flyp"))["hparams"]


def test_a_run_on_the_catalogue_schedule_says_where_its_steps_come_from(tmp_path):
    from dgmoe.engine.combinations import check_combination

    with pytest.raises(UsageError, match="the catalogue's 300 steps of PACS with --algorithm LPFT"):
        check_combination("LPFT", 300, "full", {"linear_steps": 500}, "the catalogue's 300 steps of PACS")
    check_combination("LPFT", 501, "full", {"linear_steps": 500})  # one fine-tuning update: LP-FT
    check_combination("ERM", 0, "linear", {})  # a zero-shot run and a linear probe are ERM's


@pytest.mark.parametrize("knobs,words", [
    ({"expert": "bottleneck"}, "--peft-expert bottleneck: --peft moa fixes it to kadaptation"),
    ({"router": "linear"}, "--peft-router linear: --peft moa fixes it to cosine"),
    ({"top_k": 2, "num_experts": 4}, "--peft-top-k 2: --peft moa fixes it to 1"),
    ({"targets": "attn"}, "--peft-targets attn: --peft moa fixes it to qkv"),
    ({"expert_ranks": (1, 2, 4, 16)}, "--peft-expert-ranks 1,2,4,16: --peft moa fixes it to 1,2,4,8"),
])
def test_moa_refuses_a_changed_fixed_part_naming_the_flag_and_moas_value(knobs, words):
    with pytest.raises(ConfigError) as info:
        PeftConfig("moa", **knobs)
    assert words in str(info.value) and "--peft adapter_experts" in str(info.value)


def test_moa_keeps_its_own_variants_and_adapter_experts_keep_every_knob():
    assert PeftConfig("moa", expert="lora", blocks=(10, 11)).ranks == (1, 2, 4, 8)  # its Mixture-of-LoRA
    assert PeftConfig("moa", expert="kadaptation", expert_ranks=(1, 2, 4, 8)).expert_kind == "kadaptation"
    assert PeftConfig("adapter_experts", expert="bottleneck", router="linear", top_k=2).routed


def test_flyp_names_the_text_tower_it_trains(tmp_path):
    from dgmoe.engine.config import RunConfig
    from dgmoe.engine.setup import prepare_run

    cfg = RunConfig.from_flat(dataset="Debug28", model="vit_micro_patch7_clip_28", img_size=28, head="zeroshot",
                              prompt_templates="domainbed", algorithm="FLYP", peft="lora", steps=2,
                              output_dir=str(tmp_path / "run"))
    setup = prepare_run(cfg)
    text = sum(p.numel() for p in setup.algorithm.text_tower.parameters())
    assert f"image-tower parameters trainable, and the text tower's {text:,}" in setup.summary()
    full = prepare_run(cfg.replace(peft="full"))
    assert f"the image tower and the text tower's {text:,} parameters train" in full.summary()


def test_an_unfinished_run_is_announced_by_a_dgmoe_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "results.jsonl").write_text('{"step": 0}\n')  # no `done`: unfinished
    assert run(["leaderboard", str(runs), "--out", str(tmp_path / "lb")]) == 2
    err = capsys.readouterr().err
    assert f"warning: skipped 1 unfinished run dir(s) without a 'done' file ({runs / 'a'})" in err
    assert "UserWarning" not in err and ".py:" not in err, err


def test_leaderboard_refuses_a_file_as_out_before_reading_any_run(tmp_path, capsys, monkeypatch):
    def no_records(*a, **k):
        raise AssertionError("records were read before --out was checked")

    monkeypatch.setattr("dgmoe.report.collect.load_records", no_records)
    (tmp_path / "lb").write_text("x")
    assert run(["leaderboard", str(tmp_path), "--out", str(tmp_path / "lb")]) == 2
    assert f"--out {tmp_path / 'lb'} is not a folder" in capsys.readouterr().err


def test_data_list_shows_where_imagenet_shifts_folders_go(capsys):
    assert run(["data", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("ImageNetShifts"))
    assert lines[row + 1].split()[:3] == ["folders", "under", "--data-dir:"]
    assert "imagenet/train/ (ImageNet)" in lines[row + 1] and "objectnet-1.0/images/ (ObjectNet)" in lines[row + 1]


@pytest.mark.parametrize("argv,words", [
    (["soup", "{root}", "--method", "wise-ft", "--zero-shot", "{root}", "--alpha", "1.5"],
     "WiSE-FT's mixing coefficients lie in [0, 1], got 1.5"),
])
def test_soup_refusals_answer_before_torch(argv, words, tmp_path):
    args = [a.replace("{root}", str(tmp_path)) for a in argv]
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dgmoe", *args], capture_output=True, text=True,
                          timeout=120)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr[-2000:]
    assert not names & {"torch", "pandas"}, sorted(names & {"torch", "pandas"})


def test_a_run_killed_under_another_fused_optimizer_setting_says_how_to_resume(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28", "--model-kwargs", '{"depth": 1}',
            "--steps", "2", "--checkpoint-freq", "1", "--n-per-domain", "20", "--progress", "none", "--num-threads",
            "1", "--keep-resume", "--output-dir", str(out)]
    assert run([*argv, "--fused-optimizer"]) == 0
    (out / "done").unlink()  # as if killed after its last checkpoint
    capsys.readouterr()
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "it was trained with --fused-optimizer" in err
    assert "run the same command with --fused-optimizer to resume it exactly" in err, err
