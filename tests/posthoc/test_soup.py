"""`dgmoe soup` on a real tiny CPU sweep (RotatedMNIST, 2 held-out domains x 3 hparams draws x 2 trials): soups
and ensembles are run folders whose records `dgmoe results` lists as rows of their own; greedy never keeps a
run that lowers the validation accuracy; the uniform soup of identical runs is each run; runs that do not share
an architecture or an initialisation are refused in one line, with nothing written."""
import json
import shutil

import pytest
import torch
from helpers.soup_sweep import make_soup_sweep
from safetensors.torch import load_file

from dgmoe.cli import run as cli
from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import read_jsonl
from dgmoe.engine.trainer import train
from dgmoe.posthoc.config import DEFAULT_METHODS, SoupConfig
from dgmoe.posthoc.soup import make_soups
from dgmoe.report.collect import load_records
from dgmoe.report.results import results_tables


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("soup") / "sweep"
    runs = make_soup_sweep(root)
    assert cli(["soup", str(root)]) == 0  # the command, as a user runs it
    soups = sorted((root / "soups").iterdir())
    assert sorted(make_soups(root)) == soups  # run again: every soup is kept as it is (same members)
    return root, runs, soups


def _record(folder):
    (record,) = read_jsonl(folder / "results.jsonl")
    return record


def _train_val(record):
    args = record["args"]
    envs = [i for i in range(len(args["domains"])) if i not in args["test_envs"]]
    return sum(record[f"env{i}_out_acc"] for i in envs) / len(envs)


def test_soups_per_held_out_domain_are_rows_of_their_own(sweep):
    root, runs, soups = sweep
    assert len(runs) == 12
    made = sorted((f.name.split("_")[0], _record(f)["args"]["test_envs"][0], _record(f)["args"]["trial_seed"])
                  for f in soups)
    expected = sorted((m, env, trial) for m in DEFAULT_METHODS for env in (0, 1) for trial in (0, 1))
    assert made == expected
    text = results_tables(load_records(root), selection="iid")
    for row in ("ERM / vit_micro", "ERM (uniform soup) / vit_micro", "ERM (greedy soup) / vit_micro",
                "ERM (ensemble) / vit_micro", "ratatouille (ERM) / vit_micro"):
        assert f"| {row}" in text, row


def test_greedy_never_keeps_a_run_that_lowers_validation_accuracy(sweep):
    _, _, soups = sweep
    for folder in (f for f in soups if f.name.startswith("greedy")):
        record = _record(folder)
        info = record["args"]["soup"]
        best = -1.0
        for step in info["trace"]:
            assert step["added"] == (step["soup_val_acc"] >= best)
            best = max(best, step["soup_val_acc"]) if step["added"] else best
        # the soup as evaluated: its own training-domain validation is the last kept value, never below its runs'
        assert _train_val(record) == pytest.approx(info["val_acc"])
        assert info["val_acc"] >= max(s["run_val_acc"] for s in info["trace"])
        # its weights are the mean of exactly the kept runs
        kept = [load_file(f"{r}/best.safetensors") for r in info["selected"]]
        weights = load_file(str(folder / "model.safetensors"))
        for name, tensor in weights.items():
            if tensor.is_floating_point():
                mean = torch.stack([k[name].double() for k in kept]).mean(0).float()
                torch.testing.assert_close(tensor, mean, rtol=0, atol=1e-7)


def test_uniform_soup_of_identical_runs_is_each_run(sweep, tmp_path):
    _, runs, _ = sweep
    for k in range(3):
        shutil.copytree(runs[0], tmp_path / "same" / f"copy{k}")
    (folder,) = make_soups(tmp_path / "same", options=SoupConfig(methods=("uniform",)))
    soup, run = load_file(str(folder / "model.safetensors")), load_file(str(runs[0] / "best.safetensors"))
    assert soup.keys() == run.keys() and all(torch.equal(soup[k], run[k]) for k in run)
    records = read_jsonl(runs[0] / "results.jsonl")
    record = _record(folder)
    chosen = max(records, key=lambda r: (_train_val(r), -r["step"]))  # the first best: the run's best.safetensors
    for key in (k for k in record if k.startswith("env") and k.endswith("_acc")):
        assert record[key] == chosen[key], key


def _one_line_refusal(root, capsys):
    code = cli(["soup", str(root)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("dgmoe: error: "), err
    assert not (root / "soups").exists()
    return err


def test_runs_of_another_initialisation_are_refused(sweep, tmp_path, capsys):
    _, runs, _ = sweep
    shutil.copytree(runs[0], tmp_path / "a")
    shutil.copytree(runs[0], tmp_path / "b")
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    config["config"]["seeds"]["seed"] = 12345  # another random initialisation of the same architecture,
    config["initialisation"] = "random init, seed 12345"  # as such a run records it
    (tmp_path / "b" / "config.json").write_text(json.dumps(config))
    assert "do not share an initialisation (random init, seed" in _one_line_refusal(tmp_path, capsys)


def test_runs_of_another_architecture_are_refused(sweep, tmp_path, capsys):
    _, runs, _ = sweep
    shutil.copytree(runs[0], tmp_path / "a")
    deeper = RunConfig.from_file(runs[0] / "config.json").replace(model_kwargs={"depth": 2},
                                                                  output_dir=str(tmp_path / "b"))
    train(deeper)  # the same model name with two blocks: other weight shapes
    assert "do not share an architecture" in _one_line_refusal(tmp_path, capsys)


def test_results_page_links_every_selected_run(sweep, capsys):
    import re

    root, _, _ = sweep
    assert cli(["results", str(root), "--page", "--selection", "iid"]) == 0
    page = root / "results_page"
    md, html = (page / "index.md").read_text(), (page / "index.html").read_text()
    assert "- Selection: training-domain validation set" in md and "### RotatedMNIST: selected runs" in md
    assert "| ERM (greedy soup) / vit_micro" in md
    links = re.findall(r'<a href="([^"]+)">(log|config)</a>', html)
    assert len(links) == 2 * 5 * 2 * 2  # log and config of each row x held-out domain x trial
    assert all((page / target).is_file() for target, _ in links), links


def test_soups_load_as_runs_and_an_ensemble_says_it_has_no_weights(sweep, capsys):
    from dgmoe.engine.checkpoint import load_run

    _, _, soups = sweep
    network, config = load_run(next(f for f in soups if f.name.startswith("uniform")))
    assert config["soup"]["method"] == "uniform" and not network.training
    ensemble = next(f for f in soups if f.name.startswith("ensemble"))
    capsys.readouterr()
    assert cli(["analyze", "attention", str(ensemble)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "output ensemble" in err and not (ensemble / "analysis").exists()


def test_ratatouille_pools_the_runs_of_one_initialisation(sweep, tmp_path):
    _, runs, _ = sweep
    for name in ("a", "b", "other"):
        shutil.copytree(runs[0], tmp_path / name)
    config = json.loads((tmp_path / "other" / "config.json").read_text())
    config["config"]["seeds"]["seed"], config["initialisation"] = 12345, "random init, seed 12345"
    (tmp_path / "other" / "config.json").write_text(json.dumps(config))
    assert cli(["soup", str(tmp_path), "--method", "ratatouille"]) == 0  # (uniform would refuse this folder)
    (folder,) = (tmp_path / "soups").iterdir()
    assert [p.rsplit("/", 1)[-1] for p in _record(folder)["args"]["soup"]["members"]] == ["a", "b"]
