"""The primary tables recipe rows are quoted from, each cited by paper, table and row, with where it was checked:
the table as its authors' repository shows it (a file at a commit). Recipes cite these in `Row.quoted` and their
notes; a number no primary table could be found for says so where it is entered.

The robust fine-tuning rows (`clip-robust-domainbed`) carry their numbers here, each once, in a `Source`: the
paper, table and row, and its status: `primary` (read in the paper's own text or its authors' repository) or
`quoted` (read in later work that quotes it, named in `quoted_in`, which `recipe show` and the comparison table
print beside it). A number marked unverified where it was read is not entered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

STATUSES = ("primary", "quoted")

#: the tables as the authors' repositories show them (file at commit)
DPL_TABLE = "shogi880/DPLCLIP at 53b1ff4, imgs/Table_1_dg.png"
MIRO_TABLE = "kakaobrain/miro at 5238455, assets/main_results.png, which its README calls the paper's Table 1"
SWAD_TABLE = "khanrc/swad at 252190e, assets/fig2.png, its README's main results"
FISHR_TABLE = "alexrame/fishr at 7b8fdf1, README, 'Training' selection"
MOA_CODE = "cvlab-kaist/MoA at ed7bc9d"
MOA_TABLE = f"{MOA_CODE}, assets/results.png, the table its README and project page show"

ZERO_SHOT_CLIP = (
    "DPL (Zhang et al., Domain Prompt Learning for Efficiently Adapting CLIP to Unseen Domains, arXiv 2111.12853), "
    "Table 1, row 'CLIP (template prompt)': zero-shot CLIP ViT-B/16, prompt 'a photo of a {class name}', mean over "
    "seeds 1-3 (its +/- is a std, not entered); average 73.7, the abstract's 73.7%; no DomainNet cell (checked "
    f"against {DPL_TABLE})")
CLIP_ADAPTER = ("CLIP-Adapter (Gao et al., IJCV 2024) as run on DomainBed by later work: NOT CHECKED against a "
                "primary source: the table these cells were copied from is not recorded and none printing them "
                "could be read here")
MIRO_SWAD_SWAG = ("MIRO (Cha et al., ECCV 2022), Table 1, row 'MIRO + SWAD' of the group 'Using RegNetY-16GF "
                  f"backbone with SWAG pre-training' (batch 16; checked against {MIRO_TABLE})")
MOA = ("MoA (Lee et al., Domain Generalization Using Large Pretrained Models with Mixture-of-Adapters, WACV 2025), "
       "its overall results table, row 'ERM_KAdaptaion-MoA' (ViT-B/16, CLIP LAION2B; the table's number in the "
       f"paper not checked here; checked against {MOA_TABLE})")

#: ResNet-50 rows the seed papers quote, against the quoted paper's own table
SWAD_R50 = ("SWAD (Cha et al., NeurIPS 2021), its main results table, row 'SWAD (ours)': 88.1 79.1 70.6 50.0 46.5, "
            f"each cell equal (checked against {SWAD_TABLE})")
MIRO_R50 = ("MIRO (Cha et al., ECCV 2022), Table 1, row 'MIRO': 85.4 79.0 70.5 50.4 44.3, each cell equal "
            f"(checked against {MIRO_TABLE})")
FISHR_R50 = ("Fishr (Rame et al., ICML 2022), Section 6.B.2 (Tables 3-4), row 'Fishr' under training-domain "
             "selection: 85.5 77.8 67.8 47.4 41.7 (PACS VLCS OfficeHome TerraInc DomainNet): OfficeHome differs "
             "from the seed papers' 68.6, and so do the +/- of PACS and VLCS (0.4, 0.1 against 0.2, 0.2) (checked "
             f"against {FISHR_TABLE})")


@dataclass(frozen=True)
class Source:
    """One published row: `numbers` as printed (one per column of the row that enters them, `-` for none), the
    `paper`, `table` and `row` they are read from, their `status` (`STATUSES`), where a quoted row was read
    (`quoted_in`), the `metric` when it is not top-1 accuracy, and what a reader must know beside them (`note`)."""

    paper: str
    table: str
    row: str
    status: Literal["primary", "quoted"]
    numbers: str
    quoted_in: str = ""
    metric: str = "accuracy (%)"
    note: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES or (self.status == "quoted") != bool(self.quoted_in):
            raise ValueError(f"source {self.row!r}: status {self.status!r} needs quoted_in exactly when 'quoted'")

    @property
    def short(self) -> str:
        """Paper, table and row in a few words, with the status (`quoted in ...` for a quoted row)."""
        status = f"quoted in {self.quoted_in}" if self.quoted_in else "primary"
        return f"{self.paper.split(' (')[0]} {self.table}, row '{self.row}' ({status})"

    @property
    def text(self) -> str:
        """The whole citation: paper, table, row, metric, status and note."""
        status = f"quoted (read in {self.quoted_in})" if self.quoted_in else "primary"
        note = f"; {self.note}" if self.note else ""
        return f"{self.paper}, {self.table}, row '{self.row}': {self.metric}; {status}{note}"


#: WiSE-FT, end-to-end fine-tuning of CLIP ViT-B/16 on ImageNet. Columns here: ImageNet, V2, R, Sketch, A,
#: ObjectNet, the average of the five shifts; the paper prints ObjectNet before A.
WISE_FT = "WiSE-FT (Wortsman et al., Robust fine-tuning of zero-shot models, CVPR 2022)"
WISE_FT_TABLE = "Appendix C.7, Table 8, block 'CLIP ViT-B/16', end-to-end"
WISE_FT_NOTE = ("its columns in the paper's order: IN, V2, R, Sketch, ObjectNet, A; its ObjectNet column scores "
                "with ImageNet's class names (App. D.4: ObjectNet's own names add 2.3 points zero-shot); its head "
                "is the zero-shot head of the class names' text prompts (a random head gives poor WiSE-FT, the "
                "authors say)")
WISE_FT_ZERO_SHOT = Source(WISE_FT, WISE_FT_TABLE, "zero-shot", "primary", "68.3 61.9 77.6 48.2 49.8 53.0 58.1",
                           note=WISE_FT_NOTE)
WISE_FT_FINE_TUNED = Source(WISE_FT, WISE_FT_TABLE, "standard fine-tuning", "primary",
                            "81.3 70.9 65.6 46.3 36.7 49.6 53.8", note=WISE_FT_NOTE)
WISE_FT_HALF = Source(WISE_FT, WISE_FT_TABLE, "WiSE-FT, alpha=0.5", "primary", "81.7 72.8 78.7 53.9 52.2 57.3 63.0",
                      note=WISE_FT_NOTE)
WISE_FT_OPTIMAL = Source(WISE_FT, WISE_FT_TABLE, "WiSE-FT, optimal alpha", "primary",
                         "82.6 73.2 80.1 54.1 54.6 57.7 63.5",
                         note="each column at its own best alpha of the grid (the average's too); " + WISE_FT_NOTE)

#: CLIPood and the rows its Table 1 prints, CLIP ViT-B/16 on DomainBed's five (PACS, VLCS, OfficeHome,
#: TerraIncognita, DomainNet) and their average, tested on each held-out domain's 20% `out` split
CLIPOOD = "CLIPood (Shu et al., CLIPood: Generalizing CLIP to Out-of-Distributions, ICML 2023)"
CLIPOOD_TABLE = "Table 1, CLIP ViT-B/16"
CLIPOOD_SPLIT = ("tested on the held-out domain's 20% 'out' split (thuml/CLIPood at 538dd3b, converter_domainbed.py: "
                 "holdout 0.2, test_datasets are the target domains' out splits)")
CLIPOOD_ROW = Source(CLIPOOD, CLIPOOD_TABLE, "CLIPood", "quoted", "97.3 85.0 87.0 60.4 63.5 78.6",
                     quoted_in="SBGen Table 1, the TransDG README, QT-DoG and thuml/CLIPood issue #10",
                     note=CLIPOOD_SPLIT)
CLIPOOD_ERM = Source(CLIPOOD, CLIPOOD_TABLE, "ERM", "quoted", "96.1 83.0 83.3 60.9 59.9 76.6",
                     quoted_in="thuml/CLIPood issue #10", note=CLIPOOD_SPLIT)
CLIPOOD_ZERO_SHOT = Source(CLIPOOD, CLIPOOD_TABLE, "zero-shot CLIP", "quoted", "96.2 81.7 82.0 33.4 57.5 70.2",
                           quoted_in="SBGen Table 1, citing CLIPood Table 1",
                           note="prompt 'a photo of a {}.' with underscores in class names read as spaces (primary: "
                                "thuml/CLIPood engine.py); " + CLIPOOD_SPLIT)

#: FLYP, CLIP ViT-B/16 fine-tuned on ImageNet: ImageNet accuracy / the average over the five shifts
FLYP = "FLYP (Goyal et al., Finetune like you pretrain, CVPR 2023)"
FLYP_TABLE = "Table 1, ImageNet, ViT-B/16"
FLYP_QUOTED = "a later paper quoting FLYP's Table 1 (which one was not recorded)"
FLYP_OBJECTNET = ("FLYP's ObjectNet numbers come from a copy of about 23.7k images (locuslab/FLYP issue #7), not "
                  "the full set")
FLYP_ZERO_SHOT = Source(FLYP, FLYP_TABLE, "zero-shot", "quoted", "68.3 58.7", quoted_in=FLYP_QUOTED,
                        note=FLYP_OBJECTNET)
FLYP_FINE_TUNED = Source(FLYP, FLYP_TABLE, "fine-tuning", "quoted", "81.3 54.9", quoted_in=FLYP_QUOTED,
                         note=FLYP_OBJECTNET)
FLYP_LP_FT = Source(FLYP, FLYP_TABLE, "LP-FT", "quoted", "81.7 60.3", quoted_in=FLYP_QUOTED, note=FLYP_OBJECTNET)
FLYP_OWN = ("FLYP's own ImageNet row is not entered: it could not be verified (no primary or quoting source read "
            "here prints it consistently)")
FLYP_IWILDCAM = Source(FLYP, "Table 1, iWildCam", "FLYP", "quoted", "52.2 35.6", quoted_in=FLYP_QUOTED,
                       metric="macro-F1 (%), ID / OOD test (locuslab/FLYP issue #12, its maintainer)")
FLYP_FMOW = Source(FLYP, "Table 1, FMoW", "FLYP", "quoted", "68.6 41.3", quoted_in=FLYP_QUOTED,
                   metric="ID / OOD test, each as FLYP's Table 1 labels FMoW (WILDS' OOD metric for FMoW is the "
                          "worst region's accuracy; which one the quote holds was not checked)")

#: DPL's zero-shot row (PACS, VLCS, OfficeHome, TerraIncognita, DomainNet), on DomainBed's code and test split
DPL_ZERO_SHOT = Source("DPL (Zhang et al., Domain Prompt Learning for Efficiently Adapting CLIP to Unseen Domains, "
                       "arXiv 2111.12853)", "Table 1", "CLIP (template prompt)", "primary", "96.1 82.3 82.3 34.1 -",
                       note="zero-shot CLIP ViT-B/16, prompt 'a photo of a {class name}', mean over seeds 1-3; no "
                            f"DomainNet cell (checked against {DPL_TABLE})")
