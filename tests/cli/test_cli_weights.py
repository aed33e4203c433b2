"""`dgmoe weights get` (`dgmoe.cli.weights`): help, the declared checkpoints and one-line refusals; the fetch itself
is tested against a loopback Hub in tests/data/test_download_hub.py."""
import pytest
from cli_checks import help_text, refused, subcommands

from dgmoe.models.hub_weights import WEIGHTS
from dgmoe.names import MODEL_NAMES


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("weights")]])
def test_help(cli, path):
    help_text(cli, "weights", *path)


def test_every_declared_checkpoint_fits_models_dgmoe_has_and_is_a_safetensors_file():
    assert len({w.name for w in WEIGHTS}) == len(WEIGHTS)
    for w in WEIGHTS:
        assert w.filename.endswith(".safetensors") and set(w.models) <= set(MODEL_NAMES), w.name
        assert not w.pinned  # no commit was read from here: the listing says "not pinned"


def test_name_and_to_are_required_and_a_typo_gets_the_closest_name(cli, tmp_path):
    refused(cli, "weights", "get", "--to", tmp_path, says=("name a checkpoint",))
    refused(cli, "weights", "get", "deit_small_patch16_224", says=("--to is required",))
    refused(cli, "weights", "get", "deit_smal_patch16_224", "--to", tmp_path, says=("did you mean deit_small",))
    assert list(tmp_path.iterdir()) == []


def test_list_says_the_revisions_are_not_pinned(cli):
    result = cli("weights", "get", "--list")
    assert result.exit_code == 0 and "not pinned" in result.output and "timm/deit_base_patch16_224.fb_in1k" \
        in result.output


def test_the_refusal_of_pretrained_true_names_the_command():
    from dgmoe.names import missing_checkpoint_message

    assert "dgmoe weights get NAME --to DIR" in missing_checkpoint_message(True)
