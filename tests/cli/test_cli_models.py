"""`dgmoe models` (`dgmoe.cli.models`): registered models, one line each, from their meta-device build."""
from cli_checks import help_text, refused

from dgmoe.names import MODEL_NAMES


def test_help(cli):
    help_text(cli, "models")


def test_a_pattern_lists_the_matching_models_with_their_paper(cli):
    result = cli("models", "gmoe_tiny*")
    assert result.exit_code == 0, result.output
    rows = result.output.splitlines()[1:]
    assert [row.split()[0] for row in rows] == sorted(n for n in MODEL_NAMES if n.startswith("gmoe_tiny"))
    assert "Li et al., ICLR 2023" in rows[0]


def test_names_prints_bare_names(cli):
    result = cli("models", "--names", "vit_tiny*")
    assert result.exit_code == 0
    assert result.output.split() == sorted(n for n in MODEL_NAMES if n.startswith("vit_tiny"))


def test_an_unknown_peft_mode_is_refused(cli):
    refused(cli, "models", "--peft", "nope", says=("--peft", "'nope' is not one of"))
