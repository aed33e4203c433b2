"""`dgmoe quickstart` (`dgmoe.cli.quickstart`): ViT vs GMoE on bundled MNIST; the runs themselves are tested in
tests/experiments/."""
from cli_checks import help_text, refused


def test_help(cli):
    assert "--test-envs" in help_text(cli, "quickstart")


def test_zero_steps_is_refused_before_anything_is_written(cli, tmp_path):
    refused(cli, "quickstart", "--steps", "0", "--output-dir", tmp_path / "q", says=("--steps must be >= 1",))
    assert not (tmp_path / "q").exists()


def test_only_the_bundled_datasets_are_offered(cli):
    refused(cli, "quickstart", "--dataset", "PACS", says=("--dataset", "RotatedMNIST", "ColoredMNIST"))
