"""`dgmoe algorithms` (`dgmoe.cli.algorithms`): the registered algorithms with their papers, and `bench`."""
import pytest
from cli_checks import help_text, refused, subcommands

from dgmoe.names import ALGORITHM_NAMES


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("algorithms")]])
def test_help(cli, path):
    help_text(cli, "algorithms", *path)


def test_lists_every_registered_algorithm_first_on_its_line(cli):
    result = cli("algorithms")
    assert result.exit_code == 0, result.output
    listed = {line.split()[0] for line in result.output.splitlines() if line and not line[0].isspace()}
    assert listed == set(ALGORITHM_NAMES)


def test_bench_refuses_too_few_timed_steps(cli):
    refused(cli, "algorithms", "bench", "--steps", "1", says=("--steps must be >= 5",))
