"""The configs of `dgmoe results` and `dgmoe report`; their options are generated from
these fields (`dgmoe.cli.options`). Light: imports neither torch nor pandas."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dgmoe.settings import ConfigError, Settings, existing_file, existing_folder, setting

SELECTIONS = ("iid", "loo", "oracle", "worst", "worst-id", "wilds", "all")
#: the help of every RUNS_DIR argument that reads records (also `dgmoe leaderboard`'s)
RUNS_DIR = "A folder of runs (searched recursively for results.jsonl)."


@dataclass(frozen=True)
class ResultsConfig(Settings):
    """`dgmoe results RUNS_DIR`."""

    runs_dir: str = setting("", RUNS_DIR, argument=True, required=True, parser=existing_folder)
    latex: bool = setting(False, "LaTeX (booktabs) instead of Markdown.", flags=("--latex",))
    selection: str | None = setting(
        None, "Model selection: training-domain validation (iid), leave-one-domain-out (loo), test-domain oracle, "
              "worst-group validation on the OOD validation split (worst: WILDS tables for FMoW, iWildCam, ...; "
              "WILDS' default), the same on the ID validation split id_val (worst-id: WILDS' named alternative), "
              "WILDS' official validation metric per dataset on the OOD split (wilds: iWildCam's macro-F1, "
              "Camelyon17's accuracy), or all (the default: DomainBed's three, then worst for the WILDS datasets). "
              "Single-source tables always use training-domain validation.", choices=SELECTIONS)
    single_source: bool = setting(False, "Single-source DG tables (GMoE Table 3/12) from runs trained on one domain.",
                                  flags=("--single-source",))
    baseline: str | None = setting(None, "With --single-source: the row improvements are measured against: a model "
                                         "(e.g. vit_tiny_patch16_224, also built with --model-kwargs), an algorithm, "
                                         "or a run --label.", metavar="MODEL_OR_ALGO")
    test_split: str = setting("in", "The held-out domains' split DomainBed's tables report: in (80% of each domain, "
                                    "DomainBed's model_selection.py) or out (20%, CLIPood's converter_domainbed.py); "
                                    "every table says which. With out, test-domain validation (oracle) is left out "
                                    "of `all` and refused by name (it selects on that split).",
                              choices=("in", "out"))
    ood_split: str = setting("in", "With --single-source: split of the other domains reported as OOD accuracy.",
                             choices=("in", "out"))
    absolute: bool = setting(False, "With --single-source: improvements in points, not relative %.",
                             flags=("--absolute",))
    complete_trials: bool = setting(False, "Averages table: leave out trial seeds that lack a test domain (DomainBed "
                                           "averages the domains they have).", flags=("--complete-trials",))
    include_unfinished: bool = setting(False, "Also use run dirs that have no 'done' file yet.",
                                       flags=("--include-unfinished",))
    recipe: str | None = setting(None, "RUNS_DIR is a `dgmoe recipe launch` folder: print the recipe's rows, the "
                                       "paper's numbers beside the obtained ones and the difference (saved as "
                                       "RUNS_DIR/results_recipe.md).", metavar="NAME")
    hparams: bool = setting(False, "After each dataset's table, the runs its cells selected: per domain and trial "
                                   "seed the hparams draw, step, test accuracy, the hparams that differ between runs "
                                   "and the run folder (log, config).", flags=("--hparams",))
    page: bool = setting(False, "Also write a results page to publish, RUNS_DIR/results_page/index.md and "
                                "index.html: the tables, the runs each cell selected with their hparams and per-seed "
                                "values, and links to each run's log and config (with --recipe: the paper's numbers "
                                "first).", flags=("--page",))
    csv: bool = setting(False, "Also write the tables as CSV beside the .md/.tex (results.csv, ...): every cell with "
                               "its mean and SE, and the protocol lines, the same numbers as the tables.",
                        flags=("--csv",))
    no_save: bool = setting(False, "Only print; do not write results.md/.tex into RUNS_DIR.", flags=("--no-save",))
    shift_fit: str | None = setting(None, "Distribution-shift tables (ImageNetShifts): a CSV of a baseline testbed "
                                          "(a model column, then accuracies in % under the suite's domain names) to "
                                          "fit each shift's logit-linear baseline and add effective robustness "
                                          "(Taori et al., 2020).", parser=existing_file, metavar="FILE")


@dataclass(frozen=True)
class ReportConfig(Settings):
    """`dgmoe report RUNS_DIR`."""

    runs_dir: str = setting("", RUNS_DIR, argument=True, required=True, parser=existing_folder)
    out: str | None = setting(None, "Report folder (index.html, runs/, figures/; default: RUNS_DIR/report/), or an "
                                    ".html file (its runs/ and figures/ go to NAME_files/ beside it).")
    selection: str = setting("all", "Model selection method(s) of the results tables.", choices=SELECTIONS)
    include: tuple[str, ...] = setting((), "Markdown file to add as a section (repeatable), e.g. the documented cost "
                                           "table.")
    title: str = setting("dgmoe report", "Title of the report.")
    no_params: bool = setting(False, "Do not rebuild each run's model to count its parameters.",
                              flags=("--no-params",))
    analyze: bool = setting(False, "First run the analysis (routing maps and expert usage for MoE runs, geo routing "
                                   "for MoGE runs, attention maps) on every run without an analysis/ folder; says "
                                   "which runs it could not analyse and why (reads each run's dataset from its "
                                   "data_dir).", flags=("--analyze",))
    n_images: int = setting(8, "With --analyze: images per domain.", minimum=1)
    pages: str = setting("selected", "Which runs get their own page and accuracy chart: selected (each group's best "
                                     "run, analysed runs, those named with --run), all, or none (the index, group and "
                                     "filter pages only).", choices=("selected", "all", "none"))
    run: tuple[str, ...] = setting((), "Also write this run folder's page and chart.")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in self.include:
            if not Path(name).is_file():
                raise ConfigError(f"--include {name}: no such file")
