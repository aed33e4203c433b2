"""`dgmoe geo` (`dgmoe.cli.geo`): the GeoMNIST benchmark, the Sentinel-2 check, the routing figures and the
location encoders."""
import pytest
from cli_checks import help_text, refused, subcommands


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("geo")]])
def test_help(cli, path):
    help_text(cli, "geo", *path)


def test_encoders_lists_the_registered_location_encoders(cli):
    from dgmoe.models.location.encoders import list_location_encoders

    result = cli("geo", "encoders")
    assert result.exit_code == 0, result.output
    assert result.output.split() == list(list_location_encoders()) and "sh" in result.output.split()


def test_analyze_refuses_a_folder_that_is_not_a_run(cli, tmp_path):
    refused(cli, "geo", "analyze", tmp_path, says=("not a dgmoe run folder",))


def test_an_unknown_method_is_refused_before_any_run(cli, tmp_path):
    refused(cli, "geo", "benchmark", "--methods", "nope", "--output-dir", tmp_path / "geo",
            says=("unknown methods ['nope']", "MoGE"))
    assert not (tmp_path / "geo").exists()
