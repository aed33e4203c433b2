"""The primary tables recipe rows are quoted from, each cited by paper, table and row, with where it was checked:
the table as its authors' repository shows it (a file at a commit). Recipes cite these in `Row.quoted` and their
notes; a number no primary table could be found for says so where it is entered.
"""
from __future__ import annotations

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
