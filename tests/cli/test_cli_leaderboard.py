"""`dgmoe leaderboard` (`dgmoe.cli.leaderboard`): WILDS leaderboard predictions of a sweep; the files are
tested in tests/report/."""
from cli_checks import help_text, refused


def test_help(cli):
    help_text(cli, "leaderboard")


def test_a_folder_without_runs_is_refused_and_nothing_is_written(cli, tmp_path):
    refused(cli, "leaderboard", tmp_path, "--out", tmp_path / "out", says=("no records", str(tmp_path)))
    assert not (tmp_path / "out").exists()


def test_a_missing_folder_names_the_argument(cli, tmp_path):
    refused(cli, "leaderboard", tmp_path / "nowhere", "--out", tmp_path / "out", says=("RUNS_DIR",))
