"""`dgmoe data` (`dgmoe.cli.data`): the catalogue, a dataset's description, folder checks, the cache."""
import pytest
from cli_checks import help_text, refused, subcommands

from dgmoe.names import DATASET_DOMAINS


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("data")]])
def test_help(cli, path):
    help_text(cli, "data", *path)


def test_list_has_every_catalogue_dataset_with_its_domains(cli):
    result = cli("data", "list")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:] if line[:1].strip()}  # (not versions)
    assert set(rows) == set(DATASET_DOMAINS)
    assert "art_painting, cartoon, photo, sketch" in rows["PACS"]


def test_info_describes_the_built_in_rotated_mnist(cli):
    result = cli("data", "info", "-d", "RotatedMNIST")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("RotatedMNIST: 6 domains, 10 classes")


def test_an_unknown_dataset_is_refused_with_the_valid_names(cli):
    refused(cli, "data", "info", "-d", "NoSuchSet", says=("unknown dataset 'NoSuchSet'", "PACS"))


def test_check_refuses_a_missing_folder(cli, tmp_path):
    refused(cli, "data", "check", tmp_path / "nowhere", says=("FOLDER", "is not a directory"))
