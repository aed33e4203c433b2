"""`dgmoe recipe` (`dgmoe.cli.recipe`): the papers' tables as recipes: list, show, launch."""
import pytest
from cli_checks import help_text, refused, subcommands

from dgmoe.recipes import list_recipes


@pytest.mark.parametrize("path", [(), *[(name,) for name in subcommands("recipe")]])
def test_help(cli, path):
    help_text(cli, "recipe", *path)


def test_list_has_every_recipe(cli):
    result = cli("recipe", "list")
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.splitlines()[1:] if line.strip()]
    assert listed == [recipe.name for recipe in list_recipes()]


def test_show_prints_the_papers_table(cli):
    recipe = list_recipes()[0]
    result = cli("recipe", "show", recipe.name)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{recipe.name}: ") and "Published numbers" in result.output


def test_an_unknown_recipe_is_refused_with_the_valid_names(cli):
    refused(cli, "recipe", "show", "nope", says=("unknown recipe 'nope'", list_recipes()[0].name))
