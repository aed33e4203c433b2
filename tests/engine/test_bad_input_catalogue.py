"""A catalogue of bad inputs: every one gets a single line `dgmoe: error: ...` naming the flag or file and
what was expected, the documented exit code, no traceback, and nothing written or changed on disk; the
corrected command is then accepted.

Cases cover the command line (train, results, sweep, data, analyze, report), the Python API, data folders,
checkpoints and run folders. Each case is (id, argv or callable, expected text, exit code).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dgmoe.cli import run
from dgmoe.errors import UsageError

TRAIN = ["train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28", "--model-kwargs", '{"depth": 1}',
         "--steps", "1", "--checkpoint-freq", "1", "--n-per-domain", "20", "--progress", "none", "--num-threads", "1"]


def without(argv: list[str], flag: str) -> list[str]:
    """argv minus `flag` and its value."""
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Bad files and folders the cases point at (made once)."""
    root = tmp_path_factory.mktemp("bad")
    out: dict[str, Path] = {}
    out["garbage_pth"] = root / "garbage.pth"
    out["garbage_pth"].write_bytes(b"not a checkpoint at all")
    out["pickle_pth"] = root / "object.pth"  # a pickle with an object: must never be unpickled
    out["pickle_pth"].write_bytes(pickle.dumps({"model": io.StringIO("x")}))
    out["wrong_shapes"] = root / "wrong.pth"
    torch.save({"pos_embed": torch.zeros(3, 3), "cls_token": torch.zeros(1)}, out["wrong_shapes"])
    from safetensors.torch import save_file

    out["resnet_file"] = root / "resnet.safetensors"  # another family's keys (a ResNet's, a sparse ViT's)
    save_file({"conv1.weight": torch.zeros(2, 1, 1, 1), "layer1.0.conv1.weight": torch.zeros(2, 2, 1, 1)},
              str(out["resnet_file"]))
    out["moe_file"] = root / "moe.safetensors"
    save_file({"cls_token": torch.zeros(1, 1, 4), "blocks.0.mlp.experts.fc1_weight": torch.zeros(2, 4)},
              str(out["moe_file"]))
    out["text_pth"] = root / "notes.pth"  # text that begins as no pickle does ('e': once a bare KeyError: 101)
    out["text_pth"].write_text("epoch 3 loss 0.25\n")
    out["not_a_dir"] = root / "a_file"
    out["not_a_dir"].write_text("x")
    # image folders: PACS layout problems
    data = root / "data"
    (data / "PACS").mkdir(parents=True)
    out["empty_pacs"] = data
    loop = root / "loop"
    for dom in ("art_painting", "cartoon", "photo", "sketch"):
        cls = loop / "PACS" / dom / "dog"
        cls.mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(cls / "a.png")
    os.symlink(loop / "PACS" / "photo" / "dog", loop / "PACS" / "photo" / "dog" / "again")
    out["loop"] = loop
    corrupt = root / "corrupt"
    for dom in ("art_painting", "cartoon", "photo", "sketch"):
        cls = corrupt / "PACS" / dom / "dog"
        cls.mkdir(parents=True)
        (cls / "a.png").write_bytes(b"\x89PNG broken")
    out["corrupt"] = corrupt
    # a results root with a broken line in the middle of a results file
    broken = root / "broken_results" / "run"
    broken.mkdir(parents=True)
    (broken / "results.jsonl").write_text('{"step": 0}\n{not json\n{"step": 2}\n')
    (broken / "done").write_text("done")
    out["broken_results"] = broken.parent
    no_args = root / "no_args" / "run"
    no_args.mkdir(parents=True)
    (no_args / "results.jsonl").write_text('{"step": 0, "env0_in_acc": 0.5}\n')
    (no_args / "done").write_text("done")
    out["no_args"] = no_args.parent
    dense = root / "dense_run"  # a finished dense run: routing analysis does not apply to it
    assert run([*TRAIN, "--output-dir", str(dense)]) == 0
    out["dense_run"] = dense
    soups = {name: root / f"soup_{name}" for name in ("ok", "unfinished", "bad_weights", "bad_config", "other_data")}
    for name, sweep in soups.items():  # two copies of the finished run: one cell of two hparams draws, damaged
        for k in range(2):
            shutil.copytree(dense, sweep / f"r{k}")
        out[f"soup_{name}"] = sweep
    (soups["unfinished"] / "r1" / "done").unlink()
    (soups["bad_weights"] / "r1" / "best.safetensors").write_bytes(b"\x00" * 64)
    (soups["bad_config"] / "r1" / "config.json").write_text("{half")
    other = json.loads((soups["other_data"] / "r1" / "config.json").read_text())
    other["config"]["data"]["n_per_domain"] = 30
    (soups["other_data"] / "r1" / "config.json").write_text(json.dumps(other))
    corrupt_config = root / "corrupt_config"
    corrupt_config.mkdir()
    (corrupt_config / "config.json").write_text("{half")
    out["corrupt_config"] = corrupt_config
    wise = root / "wise_other_head"  # a zero-shot run and a run fine-tuned from other prompt templates
    for name, chosen in (("zs", "domainbed"), ("ft", "openai_imagenet")):
        shutil.copytree(dense, wise / name)
        config = json.loads((wise / name / "config.json").read_text())
        config["head"] = {"kind": "zeroshot", "templates": chosen, "class_names": ["0", "1"],
                          "text_tower": "seeded random text tower, seed 0"}
        (wise / name / "config.json").write_text(json.dumps(config))
    out["wise_other_head"] = wise
    partial = root / "shifts_partial"  # ImageNet's training folder alone, none of its shifts
    (partial / "imagenet" / "train" / "n01440764").mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(partial / "imagenet" / "train" / "n01440764" / "a.png")
    out["shifts_partial"] = partial
    return out


# (id, argv (may use {name} placeholders for `files` and {out} for a fresh output dir), expected, exit code)
TRAIN_CASES = [
    ("dataset-case", ["--dataset", "pacs"], "Did you mean: PACS", 2),
    ("dataset-unknown", ["--dataset", "Nope"], "unknown dataset 'Nope'", 2),
    ("algorithm-case", ["--algorithm", "Coral"], "Did you mean: CORAL", 2),
    ("model-unknown", ["--model", "gmoe_micro"], "Did you mean: gmoe_micro_patch7_28", 2),
    ("test-envs-range", ["--test-envs", "9"], "out of range", 2),
    ("test-envs-negative", ["--test-envs", "-1"], "--test-envs must be >= 0", 2),
    ("test-envs-twice", ["--test-envs", "1", "--test-envs", "1"], "--test-envs names a domain twice", 2),
    ("test-envs-all", ["--test-envs", "0", "--test-envs", "1", "--test-envs", "2", "--test-envs", "3",
                       "--test-envs", "4", "--test-envs", "5"], "leave no training domain", 2),
    ("one-training-domain", ["--algorithm", "IRM", "--test-envs", "0", "--test-envs", "1", "--test-envs", "2",
                             "--test-envs", "3", "--test-envs", "4"], "IRM needs at least 2 training domains", 2),
    ("steps-negative", ["--steps", "-1"], "--steps must be >= 0", 2),
    ("steps-float", ["--steps", "2.5"], "'2.5' is not a valid integer", 2),
    ("checkpoint-freq-zero", ["--checkpoint-freq", "0"], "--checkpoint-freq must be >= 1", 2),
    ("holdout-zero", ["--holdout-fraction", "0"], "--holdout-fraction must be > 0", 2),
    ("holdout-above-one", ["--holdout-fraction", "1.5"], "--holdout-fraction must be < 1", 2),
    ("holdout-nan", ["--holdout-fraction", "nan"], "--holdout-fraction must be a finite number", 2),
    ("seed-negative", ["--seed", "-3"], "--seed must be >= 0", 2),
    ("hparams-list", ["--hparams", "[1,2]"], "--hparams must be a JSON object", 2),
    ("hparams-malformed", ["--hparams", "{bad"], "--hparams is not valid JSON", 2),
    ("hparams-negative-lr", ["--hparams", '{"lr": -1}'], "--hparams lr must be > 0", 2),
    ("hparams-zero-lr", ["--hparams", '{"lr": 0}'], "--hparams lr must be > 0", 2),
    ("hparams-nan-lr", ["--hparams", '{"lr": NaN}'], "--hparams lr must be a finite number", 2),
    ("hparams-string-lr", ["--hparams", '{"lr": "fast"}'], "--hparams lr must be a number", 2),
    ("hparams-batch-zero", ["--hparams", '{"batch_size": 0}'], "--hparams batch_size must be > 0", 2),
    ("hparams-batch-float", ["--hparams", '{"batch_size": 2.5}'], "--hparams batch_size must be an integer", 2),
    ("hparams-batch-bool", ["--hparams", '{"batch_size": true}'], "--hparams batch_size must be an integer", 2),
    ("hparams-unknown", ["--hparams", '{"learning_rate": 1}'], "unknown hyperparameter 'learning_rate'", 2),
    ("hparams-bool", ["--hparams", '{"data_augmentation": 1}'], "data_augmentation must be true or false", 2),
    ("hparams-wd-negative", ["--hparams", '{"weight_decay": -0.1}'], "weight_decay must be >= 0", 2),
    ("hparams-drop-path", ["--hparams", '{"drop_path_rate": 1.5}'], "drop_path_rate must be in [0, 1)", 2),
    ("hparams-algorithm-option", ["--algorithm", "CORAL", "--hparams", '{"coral_variant": "x"}'],
     "coral_variant must be one of 'domainbed', 'paper'", 2),
    ("hparams-mldg", ["--algorithm", "MLDG", "--hparams", '{"n_meta_test": 0}'], "n_meta_test must be > 0", 2),
    ("hparams-anneal", ["--algorithm", "IRM", "--hparams", '{"irm_penalty_anneal_iters": -5}'],
     "irm_penalty_anneal_iters must be >= 0", 2),
    ("model-kwargs-list", ["--model-kwargs", "[1]"], "--model-kwargs must be a JSON object", 2),
    ("model-kwargs-malformed", ["--model-kwargs", "{depth: 2}"], "--model-kwargs is not valid JSON", 2),
    ("model-kwargs-unknown", ["--model-kwargs", '{"bogus": 1}'], "--model vit_micro_patch7_28 cannot be built", 2),
    ("model-kwargs-type", ["--model-kwargs", '{"depth": "two"}'], "--model vit_micro_patch7_28 cannot be built", 2),
    ("model-kwargs-typo", ["--model-kwargs", '{"depht": 1}'], "unexpected keyword argument 'depht'. Did you mean: "
     "depth?", 2),
    ("model-name-tag", ["--model", "vit_micro_patch7_28.augreg_in21k"], "'.augreg_in21k' is a timm pretrained tag", 2),
    ("model-hub-name", ["--model", "hf-hub:timm/vit_small_patch16_224"], "is a Hugging Face Hub name", 2),
    ("config-records", ["--config", "{broken_results}/run/results.jsonl"], "holds a run's records (JSON lines), not a "
     "run config: pass the run's config.json", 2),
    ("model-kwargs-heads", ["--model-kwargs", '{"depth": 1, "num_heads": 5}'], "not divisible by num_heads", 2),
    ("patch-size-zero", ["--patch-size", "0"], "--patch-size must be >= 1", 2),
    ("patch-size-indivisible", ["--patch-size", "5"], "not divisible by patch_size", 2),
    ("img-size-zero", ["--img-size", "0"], "--img-size must be >= 1", 2),
    ("n-per-domain-zero", ["--n-per-domain", "0"], "--n-per-domain must be >= 1", 2),
    ("no-validation-images", ["--n-per-domain", "3"],
     "leaves no validation images (out split) in training domains 15, 30, 45, 60, 75 (3 images each)", 2),
    ("no-validation-images-fix", ["--n-per-domain", "4"], "use --n-per-domain >= 5 or a larger --holdout-fraction", 2),
    ("precision", ["--precision", "fp16"], "'fp16' is not one of 'fp32', 'tf32', 'bf16'", 2),
    ("precision-tf32-cpu", ["--precision", "tf32", "--device", "cpu"], "--precision tf32 rounds CUDA matmuls to TF32; "
     "--device cpu is not a CUDA device", 2),
    ("compile-mode-alone", ["--compile-mode", "reduce-overhead"], "--compile-mode reduce-overhead is read by "
     "--compile only", 2),
    ("compile-mode-cpu", ["--compile", "--compile-mode", "reduce-overhead", "--device", "cpu"],
     "--compile-mode reduce-overhead captures CUDA graphs; --device cpu is not a CUDA device", 2),
    ("progress", ["--progress", "loud"], "'loud' is not one of", 2),
    ("num-workers", ["--num-workers", "-1"], "--num-workers must be >= 0", 2),
    ("eval-batch", ["--eval-batch-size", "0"], "--eval-batch-size must be >= 1", 2),
    ("unknown-flag", ["--learning-rate", "1e-3"], "No such option '--learning-rate'", 2),
    ("pretrained-missing", ["--pretrained", "/nonexistent/deit.pth"], "checkpoint file not found: /nonexistent", 2),
    ("pretrained-true", ["--pretrained", "True"], "downloads nothing", 2),
    ("pretrained-model-name", ["--pretrained", "deit_small_patch16_224"], "a model name?", 2),
    ("pretrained-garbage", ["--pretrained", "{garbage_pth}"], "cannot read checkpoint {garbage_pth}", 2),
    ("pretrained-pickle", ["--pretrained", "{pickle_pth}"], "cannot read checkpoint {pickle_pth}", 2),
    ("pretrained-shapes", ["--pretrained", "{wrong_shapes}"], "{wrong_shapes}", 2),
    ("pretrained-resnet-into-vit", ["--pretrained", "{resnet_file}"],
     "holds a ResNet's weights, and --model vit_micro_patch7_28 is a dense ViT", 2),
    ("pretrained-moe-into-dense", ["--pretrained", "{moe_file}"],
     "holds a sparse (MoE) ViT's weights, and --model vit_micro_patch7_28 is a dense ViT", 2),
    ("pretrained-text", ["--pretrained", "{text_pth}"], "cannot read checkpoint {text_pth}: not a .safetensors", 2),
    ("save-flags-conflict", ["--skip-model-save", "--save-model-every-checkpoint"],
     "--skip-model-save keeps no weights and --save-model-every-checkpoint keeps them", 2),
    ("extend-nothing", ["--extend", "--steps", "3"], "--extend: {out} holds no run to extend", 2),
    ("data-dir-missing", ["--dataset", "PACS", "--data-dir", "/nonexistent/data"], "/nonexistent/data", 2),
    ("data-dir-empty", ["--dataset", "PACS", "--data-dir", "{empty_pacs}"], "PACS", 2),
    ("data-symlink-loop", ["--dataset", "ImageFolder", "--data-dir", "{loop}/PACS", "--img-size", "28"],
     "symlink loop", 2),
    ("data-corrupt-image", ["--dataset", "ImageFolder", "--data-dir", "{corrupt}/PACS", "--img-size", "28"],
     "cannot read image {corrupt}", 2),
    ("output-dir-is-a-file", ["--output-dir", "{not_a_dir}"], "{not_a_dir}", 2),
    ("label-two-lines", ["--label", "ERM\nlr=1e-4"], "--label must be one line of text", 2),
    ("label-control-character", ["--label", "ERM\x1b[31m"], "holds the control character '\\x1b'", 2),
    ("output-dir-corrupt-config", ["--output-dir", "{corrupt_config}"], "{corrupt_config}/config.json is corrupt", 2),
    ("label-bidi-override", ["--label", "ERM \u202e4-e1=rl"],
     "holds the invisible format character U+202E (RIGHT-TO-LEFT OVERRIDE)", 2),
    ("label-zero-width", ["--label", "E\u200bRM"], "holds the invisible format character U+200B (ZERO WIDTH SPACE)", 2),
    ("lpft-never-fine-tunes", ["--algorithm", "LPFT"], "--steps 1 with --algorithm LPFT: its linear probe takes the "
     "first 500 updates (linear_steps), so the run would never fine-tune", 2),
    ("lpft-no-probe", ["--algorithm", "LPFT", "--steps", "3", "--hparams", '{"linear_steps": -1}'],
     "--hparams linear_steps must be >= 1 for LPFT", 2),
    ("lpft-zero-steps", ["--algorithm", "LPFT", "--steps", "0"], "--steps 0 with --algorithm LPFT makes no update", 2),
    ("lpft-peft-linear", ["--algorithm", "LPFT", "--peft", "linear"], "--peft linear with --algorithm LPFT: LP-FT's "
     "fine-tuning phase would train the head only", 2),
    ("flyp-zero-steps", ["--algorithm", "FLYP", "--steps", "0"], "--steps 0 with --algorithm FLYP makes no update", 2),
    ("flyp-peft-linear", ["--algorithm", "FLYP", "--peft", "linear"], "only the text tower would train", 2),
    ("clipood-zero-steps", ["--algorithm", "CLIPood", "--steps", "0"], "--steps 0 with --algorithm CLIPood", 2),
    ("clipood-peft-linear", ["--algorithm", "CLIPood", "--peft", "linear"], "nothing would train", 2),
    ("moa-expert-bottleneck", ["--peft", "moa", "--peft-expert", "bottleneck"],
     "--peft-expert bottleneck: --peft moa fixes it to kadaptation", 2),
    ("moa-router", ["--peft", "moa", "--peft-router", "linear"], "--peft-router linear: --peft moa fixes it to cosine",
     2),
    ("moa-ranks", ["--peft", "moa", "--peft-expert-ranks", "2,2,2,2"], "--peft moa fixes it to 1,2,4,8", 2),
    ("zeroshot-not-clip", ["--head", "zeroshot"], "--model vit_micro_patch7_28 is not a CLIP image tower", 2),
    ("text-flag-without-head", ["--prompt-templates", "domainbed"], "--prompt-templates is read by --head zeroshot "
     "only", 2),
    ("imagenet-shifts-test-envs", ["--dataset", "ImageNetShifts", "--test-envs", "1"], "leave --test-envs out", 2),
    ("fused-optimizer-switched", ["--output-dir", "{dense_run}", "--fused-optimizer"], "it was trained without "
     "--fused-optimizer, whose Adam steps round differently: run the same command without --fused-optimizer", 2),
]
OTHER_CASES = [
    ("results-missing", ["results", "/nonexistent/runs"], "/nonexistent/runs", 2),
    ("results-broken-line", ["results", "{broken_results}", "--no-save"], "results.jsonl:2", 2),
    ("results-no-args", ["results", "{no_args}", "--no-save"], "no 'args'", 2),
    ("results-selection", ["results", "{no_args}", "--selection", "best"], "'best' is not one of", 2),
    ("sweep-dataset", ["sweep", "launch", "--datasets", "pacs", "--algorithms", "ERM", "--models",
                       "vit_micro_patch7_28", "--output-dir", "{out}", "--launcher", "dummy"], "Did you mean: PACS", 2),
    ("sweep-algorithm", ["sweep", "launch", "--datasets", "RotatedMNIST", "--algorithms", "Coral", "--models",
                         "vit_micro_patch7_28", "--output-dir", "{out}", "--launcher", "dummy"],
     "Did you mean: CORAL", 2),
    ("sweep-launcher", ["sweep", "launch", "--datasets", "RotatedMNIST", "--algorithms", "ERM", "--models",
                        "vit_micro_patch7_28", "--output-dir", "{out}", "--launcher", "slurmm"], "Did you mean", 2),
    ("sweep-status-missing", ["sweep", "status", "--output-dir", "/nonexistent/sweep"], "/nonexistent/sweep", 2),
    ("data-prepare-missing", ["data", "prepare", "--dataset", "PACS", "--data-dir", "/nonexistent/d"],
     "/nonexistent/d", 2),
    ("data-check-empty", ["data", "check", "{empty_pacs}/PACS"], "holds no image", 1),
    ("data-check-other-dataset", ["data", "check", "{corrupt}/PACS", "--dataset", "VLCS"],
     "its domains (art_painting, cartoon, photo, sketch) are not VLCS's (Caltech101, LabelMe, SUN09, VOC2007); "
     "they are PACS's", 1),
    ("data-check-unknown-version", ["data", "check", "{corrupt}/PACS"],
     "matches no known version of PACS (closest official (9,991 images): art_painting: 1 images", 1),
    ("analyze-missing", ["analyze", "routing", "/nonexistent/run"], "/nonexistent/run", 2),
    ("analyze-dense", ["analyze", "routing", "{dense_run}"], "{dense_run} holds a dense VisionTransformer (no MoE", 2),
    ("analyze-cub-dense", ["analyze", "cub", "{dense_run}", "--cub-dir", "{empty_pacs}"], "no MoE layer", 2),
    ("report-missing", ["report", "/nonexistent/runs"], "/nonexistent/runs", 2),
    ("soup-unfinished-member", ["soup", "{soup_unfinished}"], "{soup_unfinished}/r1 (unfinished (no done file))", 2),
    ("soup-unreadable-weights", ["soup", "{soup_bad_weights}"], "{soup_bad_weights}/r1 (unreadable weights", 2),
    ("soup-unreadable-config", ["soup", "{soup_bad_config}"], "{soup_bad_config}/r1 (unreadable", 2),
    ("soup-other-data", ["soup", "{soup_other_data}"], "not trained on the same data (--n-per-domain 20 vs 30)", 2),
    ("soup-method", ["soup", "{soup_ok}", "--method", "uniform,soupy"], "'soupy' is not one of", 2),
    ("soup-weights", ["soup", "{soup_ok}", "--weights", "middle"], "'middle' is not one of", 2),
    ("soup-out-is-a-file", ["soup", "{soup_ok}", "--out", "{not_a_dir}"], "--out {not_a_dir} is not a folder", 2),
    ("soup-out-under-a-file", ["soup", "{soup_ok}", "--out", "{not_a_dir}/soups"], "({not_a_dir} is a file)", 2),
    ("report-out-is-a-file", ["report", "{dense_run}", "--out", "{not_a_dir}"], "{not_a_dir}: File exists", 2),
    ("soup-missing", ["soup", "/nonexistent/runs"], "/nonexistent/runs", 2),
    ("wise-ft-other-head", ["soup", "{wise_other_head}", "--method", "wise-ft", "--zero-shot", "{wise_other_head}/zs"],
     "{wise_other_head}/ft was not fine-tuned from its zero-shot head (--prompt-templates domainbed vs "
     "openai_imagenet)", 2),
    ("data-check-shifts-missing", ["data", "check", "{shifts_partial}", "--dataset", "ImageNetShifts"],
     "is not ImageNetShifts as `dgmoe train --data-dir {shifts_partial}` reads it: ImageNetShifts: {shifts_partial} "
     "lacks imagenet/val/ (ImageNet-val), imagenetv2-matched-frequency-format-val/ (ImageNet-V2)", 1),
    ("soup-alpha-above-one", ["soup", "{soup_ok}", "--method", "wise-ft", "--zero-shot", "{dense_run}", "--alpha",
                              "1.5"], "WiSE-FT's mixing coefficients lie in [0, 1], got 1.5", 2),
    ("leaderboard-out-is-a-file", ["leaderboard", "{dense_run}", "--out", "{not_a_dir}"],
     "--out {not_a_dir} is not a folder ({not_a_dir} is a file)", 2),
    ("leaderboard-out-under-a-file", ["leaderboard", "{dense_run}", "--out", "{not_a_dir}/lb"],
     "({not_a_dir} is a file)", 2),
    ("results-test-split-oracle", ["results", "{no_args}", "--test-split", "out", "--selection", "oracle"],
     "--test-split out with --selection oracle", 2),
    ("results-test-split-recipe", ["results", "{no_args}", "--test-split", "out", "--recipe", "clip-robust-domainbed"],
     "test splits and tables from the recipe", 2),
]


def snapshot(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    if path.is_file():
        return {str(path): hashlib.md5(path.read_bytes()).hexdigest()}
    return {str(p): hashlib.md5(p.read_bytes()).hexdigest() if p.is_file() else "dir" for p in sorted(path.rglob("*"))}


def check_one_line(capsys, code: int, expected_code: int, expected: str) -> str:
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    assert code == expected_code, err
    assert lines and lines[-1].startswith("dgmoe: error: "), err
    assert "Traceback" not in err, err
    assert expected in lines[-1], lines[-1]
    return lines[-1]


def fill(items, files, out):
    """Replace {name} placeholders (files, {out}); JSON braces elsewhere stay as they are."""
    names = {**{k: str(v) for k, v in files.items()}, "out": str(out)}
    filled = []
    for a in items:
        for k, v in names.items():
            a = a.replace("{" + k + "}", v)
        filled.append(a)
    return filled


@pytest.mark.parametrize("case,argv,expected,code", TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_train_refuses_bad_input_in_one_line_and_writes_nothing(case, argv, expected, code, files, tmp_path, capsys):
    out = tmp_path / "run"
    args = fill(argv, files, out)
    base = TRAIN + ([] if "--output-dir" in args else ["--output-dir", str(out)])
    if "--model-kwargs" in args:
        base = without(base, "--model-kwargs")
    before = {k: snapshot(v) for k, v in files.items()}
    check_one_line(capsys, run([*base, *args]), code, fill([expected], files, out)[0])
    assert not out.exists()
    assert {k: snapshot(v) for k, v in files.items()} == before


@pytest.mark.parametrize("case,argv,expected,code", OTHER_CASES, ids=[c[0] for c in OTHER_CASES])
def test_other_commands_refuse_bad_input_in_one_line(case, argv, expected, code, files, tmp_path, capsys):
    out = tmp_path / "sweep"
    before = {k: snapshot(v) for k, v in files.items()}
    check_one_line(capsys, run(fill(argv, files, out)), code, fill([expected], files, out)[0])
    assert not out.exists()
    assert {k: snapshot(v) for k, v in files.items()} == before  # (no empty analysis/ left in a run either)


def test_help_and_print_config_are_truthful_about_the_required_output_dir(capsys):
    import json

    assert run(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Run folder, required" in text and "runs/run" not in text
    assert run(["train", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"]["output_dir"] is None
    check_one_line(capsys, run(TRAIN), 2, "--output-dir is required")


def test_corrected_commands_are_accepted_after_refusals(tmp_path, capsys):
    out = tmp_path / "run"
    for bad in (["--steps", "-1"], ["--hparams", '{"lr": -1}'], ["--test-envs", "9"], ["--patch-size", "5"]):
        assert run([*TRAIN, "--output-dir", str(out), *bad]) == 2
    capsys.readouterr()
    assert run([*TRAIN, "--output-dir", str(out), "--hparams", '{"lr": 0.001}']) == 0
    assert (out / "done").exists()


def test_debug_shows_the_traceback(tmp_path, capsys):
    assert run(["--debug", *TRAIN, "--output-dir", str(tmp_path / "r"), "--steps", "-1"]) == 2
    assert "Traceback" in capsys.readouterr().err


PYTHON_API = [
    ("test_envs as a string",
     lambda: __import__("dgmoe.engine.config", fromlist=["x"]).RunConfig.from_flat(test_envs="01"),
     "--test-envs must be a list of integers"),
    ("steps as a bool", lambda: __import__("dgmoe.engine.config", fromlist=["x"]).RunConfig.from_flat(steps=True),
     "--steps must be an integer"),
    ("hparams as a JSON list",
     lambda: __import__("dgmoe.engine.config", fromlist=["x"]).RunConfig.from_flat(hparams="[1]"),
     "--hparams must be a JSON object"),
    ("pretrained=True", lambda: __import__("dgmoe").create_model("vit_tiny_patch16_224", pretrained=True),
     "timm's way to download weights"),
    ("pretrained=True in the config",
     lambda: __import__("dgmoe.engine.config", fromlist=["x"]).RunConfig.from_flat(pretrained=True),
     "downloads nothing"),
    ("unknown model", lambda: __import__("dgmoe").create_model("vit_tiny"), "Did you mean"),
    ("unknown hparam", lambda: __import__("dgmoe.engine.hparams", fromlist=["x"]).run_hparams(
        "ERM", "PACS", "vit_tiny_patch16_224", 0, 0, {"lrr": 1}), "unknown hyperparameter 'lrr'"),
]


@pytest.mark.parametrize("case,call,expected", PYTHON_API, ids=[c[0] for c in PYTHON_API])
def test_python_api_raises_usage_errors(case, call, expected):
    with pytest.raises(UsageError, match=None) as info:
        call()
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_no_message_names_a_python_exception_class(capsys, monkeypatch, tmp_path):
    """A path the system refuses is reported as the system says it, of which path, never as Python's class name."""
    for error in (FileExistsError(17, "File exists", str(tmp_path / "x")), NotADirectoryError(20, "Not a directory",
                  str(tmp_path / "y")), FileNotFoundError(f"runs directory {tmp_path / 'z'} does not exist")):
        def fail(*args, error=error, **kw):
            raise error

        monkeypatch.setattr("dgmoe.report.collect.load_records", fail)
        line = check_one_line(capsys, run(["results", str(tmp_path)]), 2, str(tmp_path))
        assert type(error).__name__ not in line and "Errno" not in line, line


def test_the_catalogue_has_at_least_sixty_cases():
    assert len(TRAIN_CASES) + len(OTHER_CASES) + len(PYTHON_API) >= 60


def test_records_are_strict_json_and_no_sentinel_reaches_the_closing_line(files):
    """Every line of a run's results.jsonl parses as strict JSON (no NaN or Infinity); a value that is not a
    finite number is written as null; the closing line of records without validation accuracy prints none."""
    import json
    import math

    from dgmoe.engine.closing import finished_line
    from dgmoe.engine.io import strict_json

    def no_constants(name):
        raise AssertionError(f"{name} in a record")

    lines = (files["dense_run"] / "results.jsonl").read_text().splitlines()
    records = [json.loads(line, parse_constant=no_constants) for line in lines]
    assert records and all(json.dumps(r, allow_nan=False) for r in records)
    assert json.loads(strict_json({"a": math.nan, "b": [math.inf, 1.5]})) == {"a": None, "b": [None, 1.5]}
    blind = [{**r, **{k: None for k in r if k.endswith("_out_acc")}} for r in records]
    line = finished_line("run", blind)
    assert "no checkpoint chosen by training-domain validation" in line and "-1" not in line and "nan" not in line
