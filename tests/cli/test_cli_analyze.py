"""`dgmoe analyze` (`dgmoe.cli.analyze`): routing, attention and CUB figures of a run folder."""
import pytest
from cli_checks import help_text, refused, subcommands


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("analyze")]])
def test_help(cli, path):
    help_text(cli, "analyze", *path)


@pytest.mark.parametrize("what", ["routing", "attention", "cub"])
def test_a_folder_that_is_not_a_run_is_refused(cli, tmp_path, what):
    extra = ("--cub-dir", tmp_path) if what == "cub" else ()
    refused(cli, "analyze", what, tmp_path, *extra, says=(str(tmp_path), "not a dgmoe run folder"))
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_missing_folder_names_the_argument(cli, tmp_path):
    refused(cli, "analyze", "routing", tmp_path / "nowhere", says=("RUN_DIR", "does not exist"))
