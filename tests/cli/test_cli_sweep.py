"""`dgmoe sweep` (`dgmoe.cli.sweep`): launch, status, delete-incomplete, estimate; the launchers are tested in
tests/sweep/."""
import pytest
from cli_checks import help_text, refused, subcommands


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("sweep")]])
def test_help(cli, path):
    help_text(cli, "sweep", *path)


def test_a_dummy_launch_prints_domainbeds_jobs_and_writes_nothing(cli, tmp_path):
    out = tmp_path / "sweep"
    result = cli("sweep", "launch", "--launcher", "dummy", "--datasets", "Debug28", "--algorithms", "ERM",
                 "--models", "vit_tiny_patch16_224", "--output-dir", out, "--n-hparams", "1", "--n-trials", "1")
    assert result.exit_code == 0, result.output
    commands = [line for line in result.output.splitlines() if line.startswith("Dummy launcher: ")]
    assert len(commands) == 6  # Debug28's 3 domains held out singly and in pairs (DomainBed's sweep)
    assert all("--dataset Debug28" in c and "--algorithm ERM" in c for c in commands)
    assert not out.exists()


def test_status_counts_the_jobs_of_an_empty_sweep_folder(cli, tmp_path):
    result = cli("sweep", "status", "--output-dir", tmp_path)
    assert result.exit_code == 0 and result.output.startswith("0 job(s): 0 done"), result.output


def test_status_of_a_missing_folder_is_refused(cli, tmp_path):
    refused(cli, "sweep", "status", "--output-dir", tmp_path / "nowhere", says=("does not exist",))
