"""The configs of the sweep commands that inspect a sweep rather than describe one (`dgmoe sweep status`,
`delete-incomplete`, `estimate`); their options are generated from these fields (`dgmoe.cli.options`). Light:
imports no torch."""
from __future__ import annotations

from dataclasses import dataclass

from dgmoe.settings import Settings, setting


@dataclass(frozen=True)
class StatusConfig(Settings):
    """`dgmoe sweep status`."""

    output_dir: str = setting("", "The sweep directory.", required=True)
    verbose: bool = setting(False, "List every job with its state.", flags=("--verbose", "-v"))


@dataclass(frozen=True)
class DeleteConfig(Settings):
    """`dgmoe sweep delete-incomplete`."""

    output_dir: str = setting("", "The sweep directory.", required=True)
    keep_failed: bool = setting(False, "Delete only incomplete jobs, keep failed ones.", flags=("--keep-failed",))
    yes: bool = setting(False, "Do not ask for confirmation.", flags=("--yes", "-y"))


@dataclass(frozen=True)
class EstimateConfig(Settings):
    """`dgmoe sweep estimate`: the cost of the GMoE study from measured step times
    (`dgmoe.sweep.estimate.estimate_study`)."""

    step_time: tuple[str, ...] = setting((), "MODEL=SECONDS per training step of --ref-images images (repeat per "
                                             "model).", required=True)
    eval_time: tuple[str, ...] = setting((), "MODEL=SECONDS per inference batch of --ref-images images (default: "
                                             "1/3 of the step).")
    ref_images: int = setting(160, "Images per measured step.", minimum=1)
    algorithms: tuple[str, ...] = setting(("ERM",), "", commas=True)
    n_hparams: int = setting(1, "Hparam draws per cell.", minimum=1)
    n_trials: int = setting(3, "Trial seeds.", minimum=1)
    with_pairs: bool = setting(False, "Add test-env pairs (leave-one-domain-out selection).", flags=("--with-pairs",))
    job_overhead_s: float = setting(60.0, "Start-up cost per job.", minimum=0)
    gpus: tuple[int, ...] = setting((1, 8, 64), "GPU counts to report the wall-clock for.", minimum=1)
