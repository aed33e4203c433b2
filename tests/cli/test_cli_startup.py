"""A command line that starts at once: help, every subcommand's help and argument errors import neither torch
nor pandas, and a re-run of a finished run returns before any data is loaded."""
import json
import subprocess
import sys

import pytest

from dgmoe.engine.config import RunConfig
from dgmoe.engine.lock import LOCK_NAME

HEAVY = ("torch", "pandas", "matplotlib")


def _imported(args: list[str]) -> tuple[set[str], subprocess.CompletedProcess]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dgmoe", *args], capture_output=True, text=True,
                          timeout=120)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return names, done


def test_dgmoe_help_imports_neither_torch_nor_pandas():
    names, done = _imported(["--help"])
    assert done.returncode == 0 and "train" in done.stdout
    assert "dgmoe.cli" in names and not names & set(HEAVY), sorted(names & set(HEAVY))


def test_an_argument_error_imports_neither_torch_nor_pandas():
    names, done = _imported(["train", "--test_envs", "x"])
    assert done.returncode == 2 and "--test-envs" in done.stderr
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


_EVERY_HELP = """
import sys
import click
from dgmoe.cli import main, run

def paths(group, prefix):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield prefix + [name]
        if isinstance(cmd, click.Group):
            yield from paths(cmd, prefix + [name])

seen = []
for path in paths(main, []):
    code = run([*path, "--help"])
    assert code == 0, (path, code)
    seen.append(" ".join(path))
print(repr([m for m in sys.modules if m.split(".")[0] in HEAVY]), len(seen))
"""


def test_every_subcommand_help_imports_neither_torch_nor_pandas():
    code = f"HEAVY = {HEAVY!r}\n" + _EVERY_HELP
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    heavy, n = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert int(n) >= 30 and heavy == "[]", heavy  # every command and subcommand, none pulled torch or pandas in


def test_a_finished_run_is_noticed_before_any_data_is_loaded(tmp_path, monkeypatch):
    from dgmoe.engine import trainer

    cfg = RunConfig.from_flat(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1},
                              steps=2, checkpoint_freq=1, n_per_domain=16, progress="none", num_threads=1,
                              output_dir=str(tmp_path / "run"))
    first = trainer.train(cfg)
    assert not first.already_done and not (tmp_path / "run" / LOCK_NAME).exists()  # a finished folder: no lock

    def no_data(*a, **k):
        raise AssertionError("a finished run loaded its data")

    monkeypatch.setattr(trainer, "prepare_run", no_data)
    for name in ("get_dataset", "load_dataset"):
        monkeypatch.setattr(f"dgmoe.data.catalogue.{name}", no_data, raising=False)
    again = trainer.train(cfg)
    assert again.already_done and [r["step"] for r in again.records] == [0, 1]
    assert not (tmp_path / "run" / LOCK_NAME).exists()


def test_the_nothing_to_do_line_is_printed_once(tmp_path, cli):
    out = tmp_path / "run"
    argv = ["train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28", "--model-kwargs", '{"depth": 1}',
            "--steps", "1", "--checkpoint-freq", "1", "--n-per-domain", "16", "--num-threads", "1", "--output-dir",
            str(out)]
    assert cli(*argv, "--progress", "none").exit_code == 0
    for progress in ("none", "lines"):
        again = cli(*argv, "--progress", progress)
        assert again.exit_code == 0 and again.output.count("nothing to do") == 1, again.output
    assert json.loads((out / "config.json").read_text())["n_steps"] == 1


@pytest.mark.parametrize("module", ["dgmoe.seeding", "dgmoe.recipes", "dgmoe.recipes.plan", "dgmoe.sweep.jobs"])
def test_light_modules_stay_light(module):
    done = subprocess.run([sys.executable, "-c", f"import sys, {module}; "
                           f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}])"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr[-1000:]


def test_small_things_a_newcomer_meets(tmp_path, caplog):
    import logging

    from safetensors.torch import save_file

    import dgmoe
    from dgmoe.data.catalogue import get_spec

    assert dir(dgmoe) == ["__version__", "count_parameters", "create_model", "list_models"]  # (IPython completion)
    assert get_spec("Sentinel2Sample").kind == "geo-sample"  # not MNIST
    save_file(dgmoe.create_model("vit_micro_patch7_28", num_classes=10).state_dict(), str(tmp_path / "vit.safetensors"))
    with caplog.at_level(logging.INFO, logger="dgmoe"):
        dgmoe.create_model("gmoe_micro_patch7_28", pretrained=str(tmp_path / "vit.safetensors"), num_classes=3)
    said = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.INFO)  # information, no warning
    assert "copied dense FFN into experts" in said and "re-initialised (class count differs): head" in said
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


#: (argv after `train`, words of the one-line answer): each answered from declarations, before torch starts
BEFORE_TORCH = [
    (["--model", "vit_tiny"], "Did you mean: vit_tiny_patch16_224"),
    (["--algorithm", "Coral"], "Did you mean: CORAL"),
    (["--dataset", "pacs"], "Did you mean: PACS"),
    (["--test-envs", "7"], "test env 7 is out of range for RotatedMNIST, which has 6 domains"),
    (["--dataset", "FMoW", "--test-envs", "0"], "are evaluation splits, never trained on"),
    (["--pretrained", "/nonexistent/deit.pth"], "checkpoint file not found: /nonexistent/deit.pth"),
    (["--pretrained", "deit_small_patch16_224"], "a model name?"),
    (["--model", "resnet50.a1_in1k"], "'.a1_in1k' is a timm pretrained tag"),
    (["--model", "hf-hub:timm/vit_small_patch16_224"], "is a Hugging Face Hub name"),
    (["--head", "zeroshot"], "--model vit_tiny_patch16_224 is not a CLIP image tower"),
    (["--prompt-templates", "domainbed"], "--prompt-templates is read by --head zeroshot only"),
    (["--text-pretrained", "/nonexistent/clip.pt"], "--text-pretrained is read by --head zeroshot only"),
    (["--algorithm", "FLYP", "--steps", "0"], "--steps 0 with --algorithm FLYP makes no update"),
    (["--algorithm", "LPFT", "--peft", "linear"], "--peft linear with --algorithm LPFT"),
    (["--algorithm", "LPFT", "--steps", "10", "--hparams", '{"linear_steps": 10}'], "would never fine-tune"),
    (["--peft", "moa", "--peft-expert", "bottleneck"], "--peft moa fixes it to kadaptation"),
    (["--dataset", "ImageNetShifts", "--test-envs", "1"], "leave --test-envs out"),
]


@pytest.mark.parametrize("argv,words", BEFORE_TORCH, ids=[" ".join(a) for a, _ in BEFORE_TORCH])
def test_names_ranges_and_files_answer_before_torch_in_under_a_cpu_second(argv, words, tmp_path):
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    names, done = _imported(["train", *argv, "--output-dir", str(tmp_path / "run")])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr[-2000:]
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
    assert cpu < 1.0, f"{cpu:.2f} CPU-s"
    assert not (tmp_path / "run").exists()


def test_a_cuda_device_on_a_machine_without_one_answers_before_torch(tmp_path, monkeypatch):
    import os

    from dgmoe.engine.precheck import surely_no_cuda

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no device visible, whatever the machine has
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dgmoe", "train", "--device", "cuda",
                           "--output-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120, env=env)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert done.returncode == 2 and "--device cuda: this machine has no CUDA device" in done.stderr
    assert not names & set(HEAVY)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert surely_no_cuda()
