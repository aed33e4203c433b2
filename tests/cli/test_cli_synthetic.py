"""`dgmoe synthetic` (`dgmoe.cli.synthetic`): GMoE App. B.2's synthetic experiment; its runs are tested in
tests/experiments/."""
from cli_checks import help_text, refused


def test_help(cli):
    help_text(cli, "synthetic")


def test_a_negative_seed_is_refused(cli):
    refused(cli, "synthetic", "--seeds", "-1", says=("--seeds must be >= 0",))
