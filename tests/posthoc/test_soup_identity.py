"""A soup is what it averaged: its method, its members, the weights kind and the members' weights. A soup of other
weights is another soup (best and last stand side by side); a soup whose members changed is made again in its own
folder, never beside it; run folders that cannot be members (unfinished, unreadable) are refused in one line, or
named in a partial soup's record and table row with `--partial`; members are judged by the initialisation they
recorded when they trained (a `--pretrained` file replaced since changes nothing) and by their data."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from dgmoe.cli import run as cli
from dgmoe.engine.io import read_jsonl
from dgmoe.engine.lock import RunLock
from dgmoe.engine.trainer import train
from dgmoe.report.collect import load_records
from dgmoe.report.results import results_tables

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            steps=3, checkpoint_freq=2, num_threads=1, progress="none", test_envs=[0], seed=0, trial_seed=0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three finished hparams draws of one cell (one initialisation: seed 0)."""
    root = tmp_path_factory.mktemp("identity")
    for k in range(3):
        train(output_dir=str(root / f"r{k}"), hparams_seed=k, **TINY)
    return root


def _copy(runs, dest, names=("r0", "r1", "r2")):
    for name in names:
        shutil.copytree(runs / name, dest / name)
    return dest


def _soup(*argv):
    return cli(["soup", *map(str, argv), "--num-workers", "0"])


def _record(folder):
    (record,) = read_jsonl(folder / "results.jsonl")
    return record


def _folders(out):
    return sorted(p for p in out.iterdir())


def _refusal(capsys, root, *argv):
    capsys.readouterr()
    code = _soup(root, *argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("dgmoe: error: "), err
    assert not (root / "soups").exists()
    return err


def _mean(paths):
    states = [load_file(str(p)) for p in paths]
    return {k: torch.stack([s[k].double() for s in states]).mean(0).to(states[0][k].dtype) for k in states[0]}


def test_best_and_last_weights_are_two_soups(runs, tmp_path, capsys):
    root = _copy(runs, tmp_path / "sweep")
    assert _soup(root, "--method", "uniform") == 0
    (best,) = _folders(root / "soups")
    assert _soup(root, "--method", "uniform", "--weights", "last") == 0
    assert "made already" not in capsys.readouterr().err
    (last,) = [f for f in _folders(root / "soups") if f != best]
    assert _record(best)["args"]["soup"]["weights"] == "best" and _record(last)["args"]["soup"]["weights"] == "last"
    weights = load_file(str(last / "model.safetensors"))
    expected = _mean(root / f"r{k}" / "model.safetensors" for k in range(3))
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    text = results_tables(load_records(root), selection="iid")
    assert "| ERM (uniform soup) / vit_micro" in text and "| ERM (uniform soup, last weights) / vit_micro" in text
    assert _soup(root, "--method", "uniform", "--weights", "last") == 0  # again: the same soup, kept
    assert "made already (same members and weights); kept" in capsys.readouterr().err


def test_a_soup_whose_member_weights_changed_is_made_again_in_its_folder(runs, tmp_path, capsys):
    root = _copy(runs, tmp_path / "sweep")
    assert _soup(root, "--method", "uniform") == 0
    (folder,) = _folders(root / "soups")
    before = _record(folder)["args"]["soup"]["member_sha256"]
    path = root / "r1" / "best.safetensors"
    state = load_file(str(path))
    save_file({k: v + 1 if v.is_floating_point() else v for k, v in state.items()}, str(path))
    capsys.readouterr()
    assert _soup(root, "--method", "uniform") == 0
    assert "made again" in capsys.readouterr().err
    assert _folders(root / "soups") == [folder]  # in place: no second soup beside the first
    info = _record(folder)["args"]["soup"]
    assert info["member_sha256"][1] != before[1] and info["member_sha256"][0] == before[0]
    weights, expected = load_file(str(folder / "model.safetensors")), _mean(root / f"r{k}" / "best.safetensors"
                                                                            for k in range(3))
    assert all(torch.equal(weights[k], expected[k]) for k in expected)


@pytest.mark.parametrize("damage", ["weights", "config"])
def test_an_unreadable_member_is_refused_or_left_out_with_partial(runs, tmp_path, capsys, damage):
    root = _copy(runs, tmp_path / "sweep")
    if damage == "weights":
        (root / "r2" / "best.safetensors").write_bytes(b"\x00" * 64)
    else:
        (root / "r2" / "config.json").write_text("{ half a config")
    err = _refusal(capsys, root)
    assert f"{root / 'r2'} (unreadable" in err and "--partial" in err
    assert _soup(root, "--method", "uniform", "--partial") == 0
    (folder,) = _folders(root / "soups")
    args = _record(folder)["args"]
    assert [m.rsplit("/", 1)[-1] for m in args["soup"]["members"]] == ["r0", "r1"]
    assert args["soup"]["left_out"] == [str(root / "r2")] and args["algorithm"] == "ERM (uniform soup, partial)"
    assert "| ERM (uniform soup, partial) / vit_micro" in results_tables(load_records(root), selection="iid")


def test_a_member_still_training_then_finished(runs, tmp_path, capsys):
    """The campaign's case: a soup made while a member trained, then made again once it finished: one soup, the
    complete one, in `results` (not the older, smaller one)."""
    root = _copy(runs, tmp_path / "sweep")
    (root / "r2" / "done").rename(tmp_path / "done")
    assert "r2 (unfinished (no done file))" in _refusal(capsys, root)
    with RunLock(root / "r2"):  # its trainer alive
        assert f"r2 (still training (pid {os.getpid()}))" in _refusal(capsys, root)
    assert _soup(root, "--method", "uniform", "--partial") == 0
    (folder,) = _folders(root / "soups")
    assert len(_record(folder)["args"]["soup"]["members"]) == 2
    (tmp_path / "done").rename(root / "r2" / "done")
    assert _soup(root, "--method", "uniform") == 0
    assert _folders(root / "soups") == [folder]
    info = _record(folder)["args"]["soup"]
    assert len(info["members"]) == 3 and info["left_out"] == [] and info["partial"] == []
    records = load_records(root)
    soups = records[records["algorithm"].str.contains("soup")]
    assert set(soups["run_dir"]) == {str(folder)} and set(soups["algorithm"]) == {"ERM (uniform soup)"}


def test_members_are_judged_by_the_initialisation_they_recorded(runs, tmp_path, capsys):
    pretrained = tmp_path / "base.safetensors"
    shutil.copy(runs / "r0" / "model.safetensors", pretrained)
    root = tmp_path / "sweep"
    for k in range(2):
        train(output_dir=str(root / f"p{k}"), hparams_seed=k, pretrained=str(pretrained), **TINY)
    recorded = json.loads((root / "p0" / "config.json").read_text())["initialisation"]
    state = load_file(str(pretrained))  # the file replaced after training: the members still share theirs
    save_file({k: v * 2 if v.is_floating_point() else v for k, v in state.items()}, str(pretrained))
    assert _soup(root, "--method", "uniform") == 0
    (folder,) = _folders(root / "soups")
    assert _record(folder)["args"]["soup"]["initialisation"] == recorded
    assert f"- Pretrained weights: {recorded}\n" in results_tables(load_records(root), selection="iid")
    shutil.rmtree(root / "soups")
    train(output_dir=str(root / "p2"), hparams_seed=2, pretrained=str(pretrained), **TINY)  # from the new file
    err = _refusal(capsys, root)
    assert "do not share an initialisation" in err and recorded in err


def test_members_trained_on_other_data_are_refused(runs, tmp_path, capsys):
    root = _copy(runs, tmp_path / "sweep", ("r0", "r1"))
    config = json.loads((root / "r1" / "config.json").read_text())
    config["config"]["data"]["holdout_fraction"] = 0.3
    (root / "r1" / "config.json").write_text(json.dumps(config))
    assert "were not trained on the same data (--holdout-fraction 0.2 vs 0.3)" in _refusal(capsys, root)


def test_method_takes_the_comma_list_its_help_offers(runs, tmp_path):
    root = _copy(runs, tmp_path / "sweep", ("r0", "r1"))
    assert _soup(root, "--method", "uniform,ensemble") == 0
    assert sorted(f.name.split("_")[0] for f in _folders(root / "soups")) == ["ensemble", "uniform"]


def test_an_older_soup_of_the_same_runs_under_another_name_is_named(runs, tmp_path, capsys):
    """A soup an earlier dgmoe made (named by its members, no weight hashes) beside the one made now: `soup` says
    that `results` would list both."""
    root = _copy(runs, tmp_path / "sweep", ("r0", "r1"))
    assert _soup(root, "--method", "uniform") == 0
    (folder,) = _folders(root / "soups")
    older = folder.with_name("uniform_ERM_vit_micro_patch7_28_RotatedMNIST_env0_trial0_abc123")
    folder.rename(older)
    config = json.loads((older / "config.json").read_text())
    config["soup"] = {k: v for k, v in config["soup"].items() if k not in ("member_sha256", "left_out")}
    config["soup"]["weights"] = "best.safetensors"  # as the earlier dgmoe wrote it
    (older / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert _soup(root, "--method", "uniform") == 0
    err = capsys.readouterr().err
    assert f"warning: {older} is an older soup of the same runs" in err and _folders(root / "soups") == [folder, older]
