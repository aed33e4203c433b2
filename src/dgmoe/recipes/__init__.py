"""Paper recipes: the seed papers' tables as data (`dgmoe recipe list | show | launch`, `dgmoe results
--recipe`). One module per paper declares its recipes (`gmoe`, `sfmoe`, `moge`); `sources` cites the primary
tables quoted rows come from; `base` says what a recipe is, `plan` turns one into sweeps (at the paper's scale
or a CPU smoke scale), `run` launches it, `compare` puts the obtained numbers beside the published ones and
`describe` writes `list` and `show`.

The paper modules (and through them the engine's hyperparameter defaults, hence torch) load on first use of
`ALL`, `RECIPES`, `get_recipe` or `list_recipes`, so that `dgmoe recipe --help` starts at once."""
from __future__ import annotations

from typing import Any

from dgmoe.recipes.base import Cell, Part, Recipe, Row, Weights


def __getattr__(name: str) -> Any:
    if name in ("ALL", "RECIPES"):
        from dgmoe.recipes import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'dgmoe.recipes' has no attribute {name!r}")


def get_recipe(name: str) -> Recipe:
    """The recipe called `name` (`UnknownNameError`, a usage error, lists the valid names)."""
    from dgmoe.recipes.registry import RECIPES

    return RECIPES.get(name)


def list_recipes() -> list[Recipe]:
    """Every recipe, in declaration order."""
    from dgmoe.recipes.registry import ALL

    return list(ALL)


__all__ = ["ALL", "RECIPES", "Cell", "Part", "Recipe", "Row", "Weights", "get_recipe", "list_recipes"]
