"""`dgmoe soup` (`dgmoe.cli.soup`): weight averages of a sweep's runs; the soups are tested in tests/sweep/."""
from cli_checks import help_text, refused


def test_help(cli):
    help_text(cli, "soup")


def test_a_folder_without_finished_runs_is_refused(cli, tmp_path):
    refused(cli, "soup", tmp_path, says=(str(tmp_path), "no finished run"))
    assert list(tmp_path.iterdir()) == []
