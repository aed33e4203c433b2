"""The configs of the post-hoc commands, `dgmoe soup` and `dgmoe leaderboard`; their options are generated from
these fields (`dgmoe.cli.options`). Light: imports neither torch nor pandas."""
from __future__ import annotations

from dataclasses import dataclass

from dgmoe.devices import device_setting
from dgmoe.report.config import RUNS_DIR
from dgmoe.settings import ConfigError, Settings, comma_floats, existing_folder, setting

#: the soups `dgmoe soup` makes (`dgmoe.posthoc.soup`)
METHODS = ("uniform", "greedy", "ratatouille", "ensemble", "wise-ft")
#: what `dgmoe soup` makes by default (WiSE-FT needs --zero-shot)
DEFAULT_METHODS = METHODS[:4]
#: WiSE-FT's alpha grid (mlfoundations/wise-ft README: --alpha 0 0.1 ... 1.0)
WISE_FT_ALPHAS = tuple(round(0.1 * k, 1) for k in range(11))


@dataclass(frozen=True)
class SoupConfig(Settings):
    """How `make_soups` reads, evaluates and writes (`dgmoe soup`)."""

    methods: tuple[str, ...] = setting(DEFAULT_METHODS, "Soups to make (repeat the flag or give a comma "
                                       "list; default: the first four). uniform/greedy/ensemble average the hparams "
                                       "draws of one (dataset, held-out domains, trial seed, algorithm, model); "
                                       "ratatouille the runs of any algorithm that share an initialisation; wise-ft "
                                       "interpolates --zero-shot's weights and each fine-tuned run's over --alpha.",
                                       choices=METHODS, flags=("--method",))
    which: str = setting("best", "Each run's weights: best (training-domain validation within the run) or last.",
                         choices=("best", "last"), flags=("--weights",))
    partial: bool = setting(False, "Make the soups even when run folders under RUNS_DIR cannot be members (still "
                                   "training, unfinished, unreadable): each soup of their group names them in its "
                                   "record and reads 'partial' in tables. Without it such folders stop the command.",
                            flags=("--partial",))
    device: str = device_setting("of the evaluations")
    data_dir: str | None = setting(None, "Dataset root (default: each run's own --data-dir).")
    eval_batch_size: int = setting(64, "Batch size of the evaluations.", minimum=1)
    num_workers: int = setting(0, "Data-loading worker processes of the evaluations.", minimum=0)
    zero_shot: str | None = setting(None, "With --method wise-ft: the zero-shot run folder (e.g. `dgmoe train --head "
                                          "zeroshot --steps 0`), theta_0 of WiSE-FT.", parser=existing_folder,
                                    metavar="RUN_DIR")
    alphas: tuple[float, ...] = setting(WISE_FT_ALPHAS, "With --method wise-ft: the mixing coefficients, a comma "
                                                        "list in [0, 1] (0: the zero-shot run, 1: the fine-tuned run).",
                                        parser=comma_floats, flags=("--alpha",))

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [a for a in self.alphas if not 0.0 <= a <= 1.0]
        if bad or not self.alphas:
            raise ConfigError(f"--alpha: WiSE-FT's mixing coefficients lie in [0, 1], got {bad[0] if bad else 'none'}")
        if ("wise-ft" in self.methods) != (self.zero_shot is not None):
            raise ConfigError("--method wise-ft and --zero-shot RUN_DIR go together: WiSE-FT interpolates the "
                              "zero-shot run's weights and each fine-tuned run's")


@dataclass(frozen=True)
class SoupRunConfig(Settings):
    """`dgmoe soup RUNS_DIR`: which runs, where the soups go."""

    runs_dir: str = setting("", "A sweep's runs folder.", argument=True, required=True, parser=existing_folder)
    out_dir: str | None = setting(None, "Where the soups' run folders go (default: RUNS_DIR/soups, so `dgmoe results "
                                        "RUNS_DIR` lists them as rows of their own).", flags=("--out",))


@dataclass(frozen=True)
class LeaderboardConfig(Settings):
    """`dgmoe leaderboard RUNS_DIR --out DIR`."""

    runs_dir: str = setting("", RUNS_DIR, argument=True, required=True, parser=existing_folder)
    out_dir: str = setting("", "Folder of the export: one sub-folder per method row, with its prediction files and "
                               "summary.", flags=("--out",), required=True)
    selection: str = setting("worst", "Checkpoint selection: worst-group accuracy on the OOD validation split (WILDS' "
                                      "default split), on id_val (worst-id, WILDS' named alternative), or WILDS' "
                                      "official metric per dataset on the OOD split (wilds: iWildCam's macro-F1, "
                                      "Camelyon17's accuracy; FMoW's worst-region accuracy as worst).",
                             choices=("worst", "worst-id", "wilds"))
    device: str = device_setting("of the predictions")
    data_dir: str | None = setting(None, "Dataset root (default: each run's own --data-dir).")
