"""`dgmoe export peft` (`dgmoe.cli.export`): a LoRA run's adapter in peft's format; the adapter files are
tested in tests/models/ (peft interop)."""
import pytest
from cli_checks import help_text, refused, subcommands


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("export")]])
def test_help(cli, path):
    help_text(cli, "export", *path)


def test_a_folder_that_is_not_a_run_is_refused_and_nothing_is_written(cli, tmp_path):
    (tmp_path / "run").mkdir()
    refused(cli, "export", "peft", tmp_path / "run", "--out", tmp_path / "adapter", says=("not a dgmoe run folder",))
    assert not (tmp_path / "adapter").exists()


def test_out_is_required(cli, tmp_path):
    refused(cli, "export", "peft", tmp_path, says=("--out",))
