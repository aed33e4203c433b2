"""`dgmoe results` (`dgmoe.cli.results`): DomainBed's results tables; their numbers are tested in
tests/test_selection.py, tests/parity/ and tests/report/."""
from cli_checks import help_text, refused


def test_help(cli):
    assert "--selection" in help_text(cli, "results")


def test_a_folder_without_runs_is_refused(cli, tmp_path):
    refused(cli, "results", tmp_path, says=("no records", str(tmp_path)))


def test_a_missing_folder_names_the_argument(cli, tmp_path):
    refused(cli, "results", tmp_path / "nowhere", says=("RUNS_DIR", "does not exist"))
