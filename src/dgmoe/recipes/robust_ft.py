"""The robust fine-tuning baselines of CLIP on DomainBed's five datasets and on ImageNet -> shifts:
zero-shot, linear probe, full fine-tuning, LP-FT, WiSE-FT, FLYP and CLIPood on CLIP ViT-B/16 (OpenAI), every head
initialised from the class names' text embeddings (`--head zeroshot`; prompt "a photo of a {}." on DomainBed,
OpenAI's 80 templates on ImageNet), and the rows no other tool has: GMoE on
the same tower (`gmoe_base_patch16_clip_quickgelu_224`, experts copied from CLIP's FFN) and GMoE-flavoured adapter
experts (`--peft adapter_experts`, the foundation recipe's settings), each with a text-initialised head.

Each published row cites its own paper, table and row with its status (`dgmoe.recipes.sources.Source`: primary, or
quoted with where it was read); the numbers are declared once there. CLIPood's rows (and the zero-shot row its
Table 1 prints) were tested on each held-out domain's 20% `out` split (its `converter_domainbed.py`), so they are
compared with dgmoe's `out` accuracies; DPL's row with DomainBed's `in` split; the ImageNet rows with whole
evaluation sets. WiSE-FT rows are soups the launch makes once their two parts' runs are done (`WiseFT` parts:
`dgmoe soup --method wise-ft` of each fine-tuned run against the zero-shot run of the same architecture that holds
out the same domains with the same trial seed, alpha 0, 0.1, ..., 1 and the alpha training-domain validation
picks). Their theta_0 for GMoE and adapter experts is their own network at step 0 (GMoE's routers, the adapters'
initialisation: WiSE-FT interpolates networks of one architecture), run by the parts `zero-shot-gmoe` and
`zero-shot-adapter-experts` (rows of their own). DomainBed's protocol otherwise: one hparams setting x 3 trials, the
catalogue's steps, training-domain validation.
"""
from __future__ import annotations

from typing import Any

from dgmoe.posthoc.config import WISE_FT_ALPHAS
from dgmoe.recipes import sources as src
from dgmoe.recipes.base import (
    ACROSS,
    AVG_SHIFTS,
    Cell,
    Part,
    Recipe,
    Row,
    Weights,
    WiseFT,
    cells,
    columns,
    wise_ft_algorithm,
)
from dgmoe.recipes.foundation import ADAPTER_EXPERTS
from dgmoe.recipes.gmoe import FIVE

OPENAI_B16 = "vit_base_patch16_clip_quickgelu_224"
#: ImageNet -> shifts: the catalogue's suite (`dgmoe.data.shifts`), trained on ImageNet, its validation set and
#: the five shifts held out together (its evaluation domains); the table's columns are their names
IMAGENET = "ImageNetShifts"
IMAGENET_COLUMNS = ("ImageNet-val", "ImageNet-V2", "ImageNet-R", "ImageNet-Sketch", "ImageNet-A", "ObjectNet")
#: GMoE on the same tower (experts copied from CLIP's FFN, GMoE's last-two layout, 6 experts top-2 cosine)
GMOE_B16 = "gmoe_base_patch16_clip_quickgelu_224"
CLIP_FULL = Weights("clip_b16_openai_full", "ViT-B-16.openai.state_dict.pt",
                    "OpenAI CLIP ViT-B/16, both towers: OpenAI's ViT-B-16.pt saved as a state dict, open_clip's "
                    "ViT-B-16 openai weights, or Hugging Face openai/clip-vit-base-patch16 (CLIPModel)")
NO_NUMBER = "dgmoe's row: no published number is entered for it"
TEXT: dict[str, Any] = {"head": "zeroshot", "prompt_templates": "domainbed"}
#: DomainBed's 5e-5 when every weight trains; 1e-3 for a linear probe on a frozen tower (as foundation.py)
FULL_LR, PROBE_LR = 5e-5, 1e-3


def part(name: str, algorithm: str, settings: dict[str, Any], model: str = OPENAI_B16) -> Part:
    return Part(name, FIVE, (algorithm,), (model,), pretrained=CLIP_FULL.key, settings={**TEXT, **settings},
                n_hparams=1, n_trials=3)


def row(label: str, algorithm: str, part_name: str, model: str = OPENAI_B16) -> Row:
    return Row(label, algorithm, model, tuple(Cell(d) for d in FIVE), part=part_name, added=NO_NUMBER)


def published(label: str, algorithm: str, part_name: str, source: src.Source, split: str) -> Row:
    """A row of DomainBed's five datasets (and their mean where the source prints it) from `source`, compared on
    the held-out domains' `split`."""
    names = FIVE + (ACROSS,) * (len(source.numbers.split()) > len(FIVE))
    return Row(label, algorithm, OPENAI_B16, cells(names, source.numbers, split=split), part=part_name,
               source=source)


def imagenet_part(name: str, algorithm: str, settings: dict[str, Any]) -> Part:
    """Trained on ImageNet, every evaluation set held out in one run (the catalogue's evaluation domains), 1
    hparams setting x 3 trials, the head from OpenAI's 80 ImageNet templates (CLIP's, WiSE-FT's and FLYP's
    zero-shot classifier)."""
    return Part(name, (IMAGENET,), (algorithm,), (OPENAI_B16,), pretrained=CLIP_FULL.key,
                settings={**TEXT, "prompt_templates": "openai_imagenet", **settings}, n_hparams=1, n_trials=3)


def imagenet_row(label: str, algorithm: str, part_name: str, source: src.Source | None = None,
                 added: str = NO_NUMBER, best_of: tuple[str, ...] = ()) -> Row:
    """A row of the ImageNet table: the in-distribution validation accuracy, each shift's and their average over
    the shifts (a source of two numbers: ImageNet and the average), each over the whole evaluation set."""
    names: tuple[str, ...] = IMAGENET_COLUMNS + (AVG_SHIFTS,)
    if source is None:
        return Row(label, algorithm, OPENAI_B16, tuple(Cell(IMAGENET, d, split="all") for d in names),
                   part=part_name, added=added, best_of=best_of)
    if len(source.numbers.split()) == 2:
        names = (IMAGENET_COLUMNS[0], AVG_SHIFTS)
    return Row(label, algorithm, OPENAI_B16, columns(IMAGENET, names, source.numbers, split="all"), part=part_name,
               source=source, best_of=best_of)


def soup_part(name: str, fine_tuned: str, zero_shot: str, datasets: tuple[str, ...] = FIVE,
              model: str = OPENAI_B16) -> Part:
    """The WiSE-FT soups of `fine_tuned`'s runs against `zero_shot`'s, one folder of soup runs per alpha and the
    alpha chosen on validation (made by the launch once both parts are done)."""
    soup = WiseFT(fine_tuned, zero_shot)
    algorithms = (wise_ft_algorithm("ERM"), *(wise_ft_algorithm("ERM", a) for a in soup.alphas))
    return Part(name, datasets, algorithms, (model,), settings={}, n_hparams=1, n_trials=3, wise_ft=soup)


def wise_ft_row(label: str, part_name: str, model: str = OPENAI_B16) -> Row:
    """WiSE-FT at the alpha training-domain validation picks, on DomainBed's five (dgmoe's row)."""
    return Row(label, wise_ft_algorithm("ERM"), model, tuple(Cell(d) for d in FIVE), part=part_name,
               added=NO_NUMBER)


WILDS_UNAVAILABLE = ("FLYP's WILDS numbers, shown with their metric; this recipe runs no WILDS part (the WILDS "
                     "protocol's recipes run FMoW and iWildCam)")


CHOSEN = wise_ft_algorithm("ERM")
HALF = wise_ft_algorithm("ERM", 0.5)
EVERY_ALPHA = tuple(wise_ft_algorithm("ERM", a) for a in WISE_FT_ALPHAS)

DOMAINBED = Recipe(
    "clip-robust-domainbed", "Robust fine-tuning of CLIP (zero-shot, LP, FT, LP-FT, WiSE-FT, FLYP, CLIPood)",
    "rows of WiSE-FT Table 8, CLIPood Table 1, FLYP Table 1 and DPL Table 1, and dgmoe's baselines",
    "CLIP ViT-B/16 with text-initialised heads on DomainBed and ImageNet -> shifts, train-validation selection",
    "domainbed",
    rows=(published("zero-shot CLIP (ViT-B/16), CLIPood's", "ERM", "zero-shot", src.CLIPOOD_ZERO_SHOT, "out"),
          Row("zero-shot CLIP (ViT-B/16), DPL's", "ERM", OPENAI_B16, cells(FIVE, src.DPL_ZERO_SHOT.numbers),
              part="zero-shot", source=src.DPL_ZERO_SHOT),
          row("linear probe, text-initialised (ViT-B/16)", "ERM", "linear-probe"),
          published("full fine-tune, text-initialised (ViT-B/16); CLIPood's ERM", "ERM", "fine-tune",
                    src.CLIPOOD_ERM, "out"),
          row("LP-FT (ViT-B/16)", "LPFT", "lp-ft"),
          row("FLYP (ViT-B/16)", "FLYP", "flyp"),
          published("CLIPood (ViT-B/16)", "CLIPood", "clipood", src.CLIPOOD_ROW, "out"),
          row("GMoE, text-initialised (ViT-B/16)", "ERM", "gmoe", GMOE_B16),
          row("adapter experts, text-initialised (ViT-B/16)", "ERM", "adapter-experts"),
          row("GMoE at step 0, text head (WiSE-FT's alpha 0)", "ERM", "zero-shot-gmoe", GMOE_B16),
          row("adapter experts at step 0, text head (WiSE-FT's alpha 0)", "ERM", "zero-shot-adapter-experts"),
          wise_ft_row("WiSE-FT of the fine-tune, alpha chosen on validation (ViT-B/16)", "wise-ft"),
          wise_ft_row("WiSE-FT of GMoE, alpha chosen on validation (ViT-B/16)", "wise-ft-gmoe", GMOE_B16),
          wise_ft_row("WiSE-FT of adapter experts, alpha chosen on validation (ViT-B/16)",
                      "wise-ft-adapter-experts"),
          imagenet_row("zero-shot CLIP, ImageNet -> shifts", "ERM", "imagenet-zero-shot", src.WISE_FT_ZERO_SHOT),
          imagenet_row("zero-shot CLIP, ImageNet -> shifts; FLYP's", "ERM", "imagenet-zero-shot", src.FLYP_ZERO_SHOT),
          imagenet_row("linear probe, ImageNet -> shifts", "ERM", "imagenet-linear-probe"),
          imagenet_row("full fine-tune, ImageNet -> shifts", "ERM", "imagenet-fine-tune", src.WISE_FT_FINE_TUNED),
          imagenet_row("full fine-tune, ImageNet -> shifts; FLYP's", "ERM", "imagenet-fine-tune",
                       src.FLYP_FINE_TUNED),
          imagenet_row("LP-FT, ImageNet -> shifts", "LPFT", "imagenet-lp-ft", src.FLYP_LP_FT),
          imagenet_row("FLYP, ImageNet -> shifts", "FLYP", "imagenet-flyp", added=src.FLYP_OWN),
          imagenet_row("CLIPood, ImageNet -> shifts", "CLIPood", "imagenet-clipood"),
          imagenet_row("WiSE-FT alpha=0.5, ImageNet -> shifts", HALF, "imagenet-wise-ft", src.WISE_FT_HALF),
          imagenet_row("WiSE-FT optimal alpha per column, ImageNet -> shifts", CHOSEN, "imagenet-wise-ft",
                       src.WISE_FT_OPTIMAL, best_of=EVERY_ALPHA),
          imagenet_row("WiSE-FT alpha chosen on validation, ImageNet -> shifts", CHOSEN, "imagenet-wise-ft"),
          Row("FLYP on iWildCam (ViT-B/16)", "FLYP", OPENAI_B16,
              columns("iWildCam", ("ID macro-F1", "OOD macro-F1"), src.FLYP_IWILDCAM.numbers, split="all"),
              source=src.FLYP_IWILDCAM, unavailable=WILDS_UNAVAILABLE),
          Row("FLYP on FMoW (ViT-B/16)", "FLYP", OPENAI_B16,
              columns("FMoW", ("ID", "OOD"), src.FLYP_FMOW.numbers, split="all"), source=src.FLYP_FMOW,
              unavailable=WILDS_UNAVAILABLE)),
    parts=(part("zero-shot", "ERM", {"steps": 0}),
           part("linear-probe", "ERM", {"peft": "linear", "hparams": {"lr": PROBE_LR}}),
           part("fine-tune", "ERM", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           part("lp-ft", "LPFT", {"peft": "full", "hparams": {"lr": FULL_LR, "linear_lr": PROBE_LR}}),
           part("flyp", "FLYP", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           part("clipood", "CLIPood", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           part("gmoe", "ERM", {"peft": "full", "hparams": {"lr": FULL_LR}}, GMOE_B16),
           part("adapter-experts", "ERM", ADAPTER_EXPERTS),
           part("zero-shot-gmoe", "ERM", {"steps": 0}, GMOE_B16),
           part("zero-shot-adapter-experts", "ERM", {**ADAPTER_EXPERTS, "steps": 0}),
           soup_part("wise-ft", "fine-tune", "zero-shot"),
           soup_part("wise-ft-gmoe", "gmoe", "zero-shot-gmoe", model=GMOE_B16),
           soup_part("wise-ft-adapter-experts", "adapter-experts", "zero-shot-adapter-experts"),
           imagenet_part("imagenet-zero-shot", "ERM", {"steps": 0}),
           imagenet_part("imagenet-linear-probe", "ERM", {"peft": "linear", "hparams": {"lr": PROBE_LR}}),
           imagenet_part("imagenet-fine-tune", "ERM", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           imagenet_part("imagenet-lp-ft", "LPFT", {"peft": "full", "hparams": {"lr": FULL_LR, "linear_lr": PROBE_LR}}),
           imagenet_part("imagenet-flyp", "FLYP", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           imagenet_part("imagenet-clipood", "CLIPood", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           soup_part("imagenet-wise-ft", "imagenet-fine-tune", "imagenet-zero-shot", (IMAGENET,))),
    weights=(CLIP_FULL,),
    notes=("Heads: every row's head is CLIP's zero-shot classifier of the class names (prompt 'a photo of a {}.', "
           "CLIPood's); zero-shot evaluates it untrained (--steps 0), the others train from it.",
           "Published numbers: each row's source is printed with it (paper, table, row; primary, or quoted with "
           "where it was read). Test split: CLIPood's rows are compared with dgmoe's accuracy on each held-out "
           "domain's 20% 'out' split, DPL's with DomainBed's 80% 'in' split (`dgmoe results --test-split` prints "
           "either for any sweep); the ImageNet rows with whole evaluation sets.",
           "Effective robustness: no published linear fit is shipped (none could be read in a primary source: "
           "Taori et al. 2020 publish their testbed's accuracies, not the lines); `dgmoe results --shift-fit FILE` "
           "fits one to a testbed of yours.",
           "Learning rates: DomainBed's 5e-5 when the tower trains, 1e-3 for the linear probe and LP-FT's probe; "
           "every other hparam dgmoe's default; CLIPood's Beta moving average spans each run's own steps.",
           "GMoE and adapter experts: GMoE's tower is trained whole at 5e-5 (as the fine-tune row), the adapter "
           "experts on the frozen tower at 1e-3 (the foundation recipe's); at the smoke scale GMoE runs on the "
           "CLIP-shaped micro stand-in's GMoE twin with its micro text tower.",
           "WiSE-FT: the soup parts (wise-ft, wise-ft-gmoe, wise-ft-adapter-experts, imagenet-wise-ft) are made by "
           "the launch once their fine-tuned and zero-shot parts' runs are done (with a launcher that returns "
           "before the runs end, such as Slurm, launch again afterwards: done runs are skipped and the soups made); "
           "each writes alpha 0, 0.1, ..., 1 and the alpha training-domain validation picks into <output-dir>/"
           "<soup part>. The optimal-alpha row is each column's best obtained number over the grid, as WiSE-FT's "
           "Table 8 row; the runs its soups average keep their weights at every scale.",
           "ImageNet -> shifts (WiSE-FT's and FLYP's evaluation): the same methods trained on ImageNet with every "
           "evaluation set held out in one run (ImageNet-val, -V2, -R, -Sketch, -A, ObjectNet, R's, A's and "
           "ObjectNet's classes through their class maps); the head from OpenAI's 80 ImageNet templates; the "
           "catalogue's schedule (10,001 steps of batch 32, not the papers' epochs: pass --steps to match one); "
           "each cell the whole held-out set's accuracy at the checkpoint training-domain validation picks, as "
           "`dgmoe results`' shift table, which adds effective robustness given --shift-fit. At the smoke scale it "
           "runs on stand-in folders of the suite the launch writes.",
           "Selection: training-domain validation, DomainBed's default."))

RECIPES = (DOMAINBED,)
