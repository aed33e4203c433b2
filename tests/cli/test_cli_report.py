"""`dgmoe report` (`dgmoe.cli.report`): a sweep's HTML/Markdown report; its pages are tested in tests/report/."""
from cli_checks import help_text, refused


def test_help(cli):
    help_text(cli, "report")


def test_a_folder_without_results_is_refused(cli, tmp_path):
    refused(cli, "report", tmp_path, says=("no results.jsonl under", str(tmp_path)))


def test_a_missing_folder_names_the_argument(cli, tmp_path):
    refused(cli, "report", tmp_path / "nowhere", says=("RUNS_DIR", "does not exist"))
