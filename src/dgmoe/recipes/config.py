"""The config of `dgmoe recipe launch`: which recipe, at which scale, with which inputs. Its options are
generated from these fields (`dgmoe.cli.options`); `--print-config` writes it and `--config` reads it back,
so a launch is repeatable from its file. Where and how the jobs run (launcher, `dgmoe train` execution
flags after `--`) is not part of it, as a run's execution is not part of its identity."""
from __future__ import annotations

from dataclasses import dataclass

from dgmoe.recipes.plan import SCALES
from dgmoe.settings import Settings, setting


@dataclass(frozen=True)
class RecipeLaunchConfig(Settings):
    """A recipe launch (`dgmoe.recipes.run.prepare` builds its jobs)."""

    name: str = setting("", "The recipe (see `dgmoe recipe list`).", argument=True, required=True)
    data_dir: str | None = setting(None, "Folder holding the datasets (<data-dir>/<DatasetDir>/..., WILDS folders); "
                                         "not needed at the smoke scale.")
    pretrained: tuple[str, ...] = setting(
        (), "Weights as KEY=FILE (repeat; `dgmoe recipe show NAME` lists the keys), a folder holding the files by "
            "their listed names, or one FILE when the launch needs one kind.")
    output_dir: str | None = setting(None, "Recipe folder, one sweep folder per part [runs/recipes/NAME, NAME-smoke "
                                           "at the smoke scale].")
    scale: str = setting("paper", "paper: the paper's grid; smoke: stand-in data, narrow models, a few CPU steps.",
                         choices=SCALES)
    rows: tuple[str, ...] = setting((), "Launch only these rows (labels as `show` prints them; repeat the flag).")
    n_hparams: int | None = setting(None, "Replace the parts' hparams draws.", minimum=1)
    n_trials: int | None = setting(None, "Replace the parts' trial seeds.", minimum=1)

    def folder(self) -> str:
        """`output_dir`, or runs/recipes/NAME (NAME-smoke at the smoke scale)."""
        return self.output_dir or f"runs/recipes/{self.name}{'-smoke' if self.scale == 'smoke' else ''}"
