"""Every recipe, paper by paper, table by table, and their registry (loaded on first use by `dgmoe.recipes`)."""
from __future__ import annotations

from dgmoe.recipes import foundation, gmoe, moge, robust_ft, sfmoe
from dgmoe.recipes.base import Recipe
from dgmoe.registry import Registry

#: every recipe in declaration order (paper by paper, table by table)
ALL: tuple[Recipe, ...] = (*gmoe.RECIPES, *sfmoe.RECIPES, *moge.RECIPES, *foundation.RECIPES, *robust_ft.RECIPES)
RECIPES: Registry[Recipe] = Registry("recipe")
for _recipe in ALL:
    RECIPES.add(_recipe.name, _recipe)
