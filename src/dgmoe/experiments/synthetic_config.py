"""The parameters of the GMoE App. B.2 synthetic experiment (`dgmoe.experiments.synthetic`), apart from the
experiment so that a recipe or the command line can read them without importing torch; `dgmoe synthetic`
generates its options from these fields."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dgmoe.settings import Settings, comma_ints, setting


@dataclass(frozen=True)
class SyntheticConfig(Settings):
    """App. B.2's parameters (P=10, K=4, 100k train, 2k val and 2k per test set) and our training choices."""

    n_patches: int = setting(10, "Patches per example (P).", minimum=2)
    n_classes: int = setting(4, "Classes (K).", minimum=2)
    n_train: int = setting(100_000, "Training examples.", minimum=1)
    n_val: int = setting(2_000, "Validation examples.", minimum=1)
    n_test: int = setting(2_000, "Examples per test set.", minimum=1)
    mlp_hidden: tuple[int, ...] = setting((100, 100), "Hidden widths of the MLP.", minimum=1)
    fcn_filters: int = setting(20, "Filters of the FCN.", minimum=1)
    fcn_pool: Literal["max", "mean"] = setting("max", "Pooling of the FCN.")
    epochs: int = setting(20, "Training epochs.", minimum=1)
    batch_size: int = setting(256, "Examples per step.", minimum=1)
    lr: float = setting(3e-3, "Adam learning rate.", minimum=0, exclusive_min=True)
    #: the feature probabilities of the training set; the experiment sets them (1 in the noiseless runs, the
    #: --grid values in the noisy ones), so they have no flag
    p1: float = setting(1.0, "Probability that the pixel-level feature names the class.", minimum=0, maximum=1)
    p2: float = setting(1.0, "Probability that the patch-level feature names the class.", minimum=0, maximum=1)


#: the SyntheticConfig fields the experiment sets itself (see `p1`)
SET_BY_THE_EXPERIMENT = ("p1", "p2")


@dataclass(frozen=True)
class SyntheticRun(Settings):
    """How `dgmoe synthetic` runs the experiment: where it writes, which seeds, which noisy grid."""

    out_dir: str = setting("synthetic_out", "Folder for synthetic.md, synthetic.json and the PNG figures.",
                           flags=("--out",))
    seeds: tuple[int, ...] = setting((0, 1, 2), "Seeds of the noiseless experiment (Fig. 4).", parser=comma_ints,
                                     minimum=0)
    grid: str = setting("default", "p1/p2 values of the noisy grid (Fig. 5): 'default' (0.7,0.85,1), 'full' "
                                   "(0.6..1.0 by 0.1), 'none' to skip it, or comma-separated values.")
    threads: int = setting(1, "torch CPU threads.", minimum=1)
    progress: str = setting("auto", "auto: a bar on a terminal, otherwise a line at least every 20 s (on stderr).",
                            choices=("auto", "bar", "lines", "none"))
