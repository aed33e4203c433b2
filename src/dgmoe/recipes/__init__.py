"""Paper recipes: the seed papers' tables as data (`dgmoe recipe list | show | launch`, `dgmoe results
--recipe`). One module per paper declares its recipes (`gmoe`, `sfmoe`, `moge`); `base` says what a recipe
is, `plan` turns one into sweeps (at the paper's scale or a CPU smoke scale), `run` launches it,
`compare` puts the obtained numbers beside the published ones and `describe` writes `list` and `show`."""
from __future__ import annotations

from dgmoe.recipes import gmoe, moge, sfmoe
from dgmoe.recipes.base import Cell, Part, Recipe, Row, Weights
from dgmoe.registry import Registry

#: every recipe in declaration order (paper by paper, table by table)
ALL: tuple[Recipe, ...] = (*gmoe.RECIPES, *sfmoe.RECIPES, *moge.RECIPES)
RECIPES: Registry[Recipe] = Registry("recipe")
for _recipe in ALL:
    RECIPES.add(_recipe.name, _recipe)


def get_recipe(name: str) -> Recipe:
    """The recipe called `name` (`UnknownNameError`, a usage error, lists the valid names)."""
    return RECIPES.get(name)


def list_recipes() -> list[Recipe]:
    """Every recipe, in declaration order."""
    return list(ALL)


__all__ = ["ALL", "RECIPES", "Cell", "Part", "Recipe", "Row", "Weights", "get_recipe", "list_recipes"]
