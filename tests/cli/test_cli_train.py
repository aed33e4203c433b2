"""`dgmoe train` (`dgmoe.cli.train`): one run; training itself is tested in tests/engine/."""
import json

from cli_checks import help_text, refused


def test_help(cli):
    assert "--output-dir" in help_text(cli, "train")


def test_print_config_writes_the_run_config_and_trains_nothing(cli, tmp_path):
    result = cli("train", "--output-dir", tmp_path / "run", "--dataset", "PACS", "--steps", "7", "--print-config")
    assert result.exit_code == 0, result.output
    config = json.loads(result.output)
    assert config["data"]["dataset"] == "PACS" and config["training"]["steps"] == 7
    assert not (tmp_path / "run").exists()


def test_an_unknown_dataset_is_refused_before_anything_is_written(cli, tmp_path):
    refused(cli, "train", "--output-dir", tmp_path / "run", "--dataset", "NoSuchSet",
            says=("unknown dataset 'NoSuchSet'",))
    assert not (tmp_path / "run").exists()


def test_the_run_folder_is_required(cli):
    refused(cli, "train", "--steps", "3", says=("--output-dir is required",))
