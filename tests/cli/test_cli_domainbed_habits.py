"""DomainBed's command-line habits: space-separated lists (`--test_envs 0 1`, `--algorithms ERM CORAL`) beside
repeats and comma lists, errors that say how to write a list and on which side of `--` a flag belongs, and one
spelling of the held-out option everywhere."""
import json

import pytest

from dgmoe.cli.options import spread_lists
from dgmoe.cli.train import command as train


def _config(cli, *args):
    result = cli("train", *args, "--print-config")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("spelling", [["--test_envs", "0", "1"], ["--test-envs", "0", "1"],
                                      ["--test-envs", "0", "--test-envs", "1"], ["--test-envs", "0,1"],
                                      ["--test_envs=0", "1"]])
def test_train_takes_every_spelling_of_a_list(cli, spelling):
    cfg = _config(cli, *spelling, "--dataset", "RotatedMNIST")
    assert cfg["data"]["test_envs"] == [0, 1] and cfg["data"]["dataset"] == "RotatedMNIST"


def test_a_bad_list_value_says_how_a_list_is_written(cli):
    result = cli("train", "--test_envs", "0", "one", "--print-config")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--test-envs" in result.output and "repeat the flag or use a comma list" in result.output


def test_spreading_stops_at_flags_and_leaves_what_follows_the_double_dash():
    args = ["--test_envs", "0", "1", "--steps", "5", "--", "--test_envs", "2", "3"]
    assert spread_lists(train.params, args) == ["--test_envs", "0", "--test_envs", "1", "--steps", "5", "--",
                                                "--test_envs", "2", "3"]


SWEEP = ["sweep", "launch", "--datasets", "Debug28", "--models", "vit_micro_patch7_28", "--n-hparams", "1",
         "--n-trials", "1", "--single-test-envs", "--launcher", "dummy"]


def _dummy_jobs(output):
    return [line for line in output.splitlines() if line.startswith("Dummy launcher:")]


def test_sweep_takes_space_separated_algorithms_as_domainbed_does(cli, tmp_path):
    spaced = cli(*SWEEP, "--output-dir", tmp_path / "a", "--algorithms", "ERM", "CORAL")
    comma = cli(*SWEEP, "--output-dir", tmp_path / "a", "--algorithms", "ERM,CORAL")
    repeated = cli(*SWEEP, "--output-dir", tmp_path / "a", "--algorithms", "ERM", "--algorithms", "CORAL")
    assert spaced.exit_code == comma.exit_code == repeated.exit_code == 0, spaced.output
    jobs = _dummy_jobs(spaced.output)
    assert len(jobs) == 6 and {"--algorithm CORAL" in j for j in jobs} == {True, False}  # 2 algorithms x 3 domains
    assert sorted(jobs) == sorted(_dummy_jobs(comma.output)) == sorted(_dummy_jobs(repeated.output))
    spaced_datasets = cli(*SWEEP[:2], "--datasets", "Debug28", "RotatedMNIST", *SWEEP[4:], "--algorithms", "ERM",
                          "--output-dir", tmp_path / "b")
    assert spaced_datasets.exit_code == 0 and len(_dummy_jobs(spaced_datasets.output)) == 3 + 6
    only = cli(*SWEEP, "--algorithms", "ERM", "--only-test-envs", "0", "2", "--output-dir", tmp_path / "c")
    assert only.exit_code == 0 and len(_dummy_jobs(only.output)) == 2, only.output
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("extra, expected", [
    (["--n-per-domain", "8"], "--n-per-domain is a `dgmoe train` flag: give it after `--`"),
    (["--", "--n-hparams", "3"], "--n-hparams is an option of `dgmoe sweep launch`, not a `dgmoe train` flag: "
                                 "give it before `--`"),
    (["--", "--stpes", "3"], "--stpes after `--` is not a `dgmoe train` flag (did you mean --steps"),
    (["stray"], "unexpected argument 'stray' before `--`"),
])
def test_sweep_errors_name_the_side_of_the_double_dash(cli, tmp_path, extra, expected):
    result = cli(*SWEEP, "--algorithms", "ERM", "--output-dir", tmp_path / "s", *extra)
    assert result.exit_code == 2 and expected in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Did you mean --n-hparams-from" not in result.output
    assert not (tmp_path / "s").exists()


def test_recipe_launch_names_the_side_of_the_double_dash(cli, tmp_path):
    result = cli("recipe", "launch", "gmoe-table1", "--scale", "smoke", "--launcher", "dummy", "--device", "cpu",
                 "--output-dir", tmp_path / "r")
    assert result.exit_code == 2 and "--device is a `dgmoe train` flag: give it after `--`" in result.output


def test_one_spelling_of_the_held_out_option(cli):
    from dgmoe.cli import main

    for path in (["train"], ["quickstart"]):
        text = cli(*path, "--help").output
        assert "--test-envs" in text and "--test-env " not in text, path
    assert cli("quickstart", "--test-env", "1", "--test-envs", "2").exit_code == 2  # the old spelling, hidden
    old = [p for p in main.get_command(None, "quickstart").params if "--test-env" in p.opts]
    assert len(old) == 1 and old[0].hidden  # kept for old scripts, not advertised
