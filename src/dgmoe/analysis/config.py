"""The configs of `dgmoe analyze routing|attention|cub`; their options are generated from these fields
(`dgmoe.cli.options`). Light: imports no torch."""
from __future__ import annotations

from dataclasses import dataclass

from dgmoe.settings import Settings, existing_folder, setting


@dataclass(frozen=True)
class RunAnalysisConfig(Settings):
    """Which run, which of its weights, where the figures go."""

    run_dir: str = setting("", "A trained run folder.", argument=True, required=True, parser=existing_folder)
    out_dir: str | None = setting(None, "Output folder (default: RUN_DIR/analysis, which `dgmoe report` embeds).",
                                  flags=("--out",))
    which: str = setting("best", "Weights to load: best.safetensors or model.safetensors.", choices=("best", "last"))


@dataclass(frozen=True)
class SampledAnalysisConfig(RunAnalysisConfig):
    """An analysis of a seeded sample of each domain's images."""

    data_dir: str | None = setting(None, "Dataset root (default: the run's data_dir).")
    n_images: int = setting(16, "Images per domain (a seeded sample).", minimum=1)
    seed: int = setting(0, "Seed of the image sample.")


@dataclass(frozen=True)
class RoutingAnalysisConfig(SampledAnalysisConfig):
    """`dgmoe analyze routing`."""

    show: int = setting(4, "Maps drawn per domain.", minimum=1)
    mode: str = setting("numbers", "Expert ids as numbers (GMoE Fig. 3c) or coloured cells (Figs. 10-13).",
                        choices=("numbers", "colors"))


@dataclass(frozen=True)
class AttentionAnalysisConfig(SampledAnalysisConfig):
    """`dgmoe analyze attention`."""

    show: int = setting(2, "Images drawn per domain.", minimum=1)
    block: int = setting(-1, "Transformer block (-1: the last).")


@dataclass(frozen=True)
class CubAnalysisConfig(RunAnalysisConfig):
    """`dgmoe analyze cub`."""

    cub_dir: str = setting("", "Folder holding CUB_DG/ (see dgmoe.data.cub for the layout).", required=True,
                           parser=existing_folder)
    domain: str = setting("Natural", "CUB-DG domain whose images are routed.")
    split: str = setting("train", "Split of the domain's images.", choices=("train", "test", "all"))
    n_images: int = setting(64, "Images routed.", minimum=1)
    show: int = setting(4, "Images drawn.", minimum=1)
    k: int = setting(9, "Nearest patches per part.", minimum=1)
