"""The config of `dgmoe quickstart` (`dgmoe.experiments.quickstart`), apart from the experiment so that the
command line reads it without importing torch; the options are generated from these fields."""
from __future__ import annotations

from dataclasses import dataclass

from dgmoe.settings import Settings, setting


@dataclass(frozen=True)
class QuickstartConfig(Settings):
    """ViT vs GMoE on bundled RotatedMNIST (or ColoredMNIST), some domains left out."""

    output_dir: str = setting("runs/quickstart", "Folder of the two runs.")
    dataset: str = setting("RotatedMNIST", "The bundled dataset.", choices=("RotatedMNIST", "ColoredMNIST"))
    test_envs: tuple[int, ...] = setting((0,), "The domain(s) left out, as `dgmoe train --test-envs`.", minimum=0,
                                         flags=("--test-envs", "--test_envs"))
    test_env: int | None = setting(None, "Old spelling of --test-envs.", hidden=True, minimum=0)
    steps: int = setting(300, "Training steps of each run.", minimum=1)
    seed: int = setting(0, "Seed of both runs.", minimum=0)
    eval_sample: int = setting(500, "Images per split (in, out) of every domain that the intermediate checkpoints "
                                    "evaluate, a fixed seeded sample (`dgmoe train --eval-sample`); the last "
                                    "checkpoint evaluates every image.", minimum=1)
