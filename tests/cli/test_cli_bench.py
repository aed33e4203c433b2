"""`dgmoe bench` (`dgmoe.cli.bench`): layer, models, memory, stem and data benchmarks; the timings themselves
are tested in tests/bench/."""
import pytest
from cli_checks import help_text, refused, subcommands


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("bench")]])
def test_help(cli, path):
    help_text(cli, "bench", *path)


def test_layer_refuses_too_few_rounds(cli):
    refused(cli, "bench", "layer", "--rounds", "2", says=("--rounds must be >= 5",))


@pytest.mark.parametrize("command", ["models", "memory"])
def test_an_unknown_model_is_refused_before_any_worker_starts(cli, command):
    line = refused(cli, "bench", command, "--models", "vit_small_patch16_224,no_such_model",
                   says=("--models", "unknown model 'no_such_model'"))
    assert "RuntimeError" not in line
