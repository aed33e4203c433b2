"""The robust fine-tuning baselines of CLIP on DomainBed's five datasets and on ImageNet -> shifts:
zero-shot, linear probe, full fine-tuning, LP-FT, FLYP and CLIPood on CLIP ViT-B/16 (OpenAI), every head
initialised from the class names' text embeddings (`--head zeroshot`; prompt "a photo of a {}." on DomainBed,
OpenAI's 80 templates on ImageNet), and the rows no other tool has: GMoE on
the same tower (`gmoe_base_patch16_clip_quickgelu_224`, experts copied from CLIP's FFN) and GMoE-flavoured adapter
experts (`--peft adapter_experts`, the foundation recipe's settings), each with a text-initialised head.

dgmoe's rows only, for now: the published numbers of these methods on DomainBed are not entered, because the
papers' tables could not be read and checked here (later papers quote CLIPood's, but a recipe cites the paper's own
table and row). One primary table was checked: DPL (Zhang et al., arXiv 2111.12853) Table 1, row
'CLIP (template prompt)', zero-shot CLIP ViT-B/16 on four of the five datasets (the foundation-domainbed recipe
quotes it); it has no DomainNet cell, and a cell without a value reads as a value the paper only plots, so it
is not entered here. WiSE-FT is a soup of two runs made after the launch (`soup_command`: `dgmoe soup --method
wise-ft` of a part's fine-tuned runs against the zero-shot run of the same architecture), which a recipe part
does not launch, so its rows are listed with their command, not launched. Its theta_0 for GMoE and adapter experts
is their own network at step 0 (GMoE's routers, the adapters' initialisation: WiSE-FT interpolates networks of one
architecture), run by the parts `zero-shot-gmoe` and `zero-shot-adapter-experts` (rows of their own). DomainBed's
protocol otherwise: one hparams setting x 3 trials, the catalogue's steps, training-domain validation.
"""
from __future__ import annotations

from typing import Any

from dgmoe.recipes.base import Cell, Part, Recipe, Row, Weights
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
NO_NUMBER = "dgmoe's row: the published number is not entered (not checked against the paper's table here)"
TEXT: dict[str, Any] = {"head": "zeroshot", "prompt_templates": "domainbed"}
#: DomainBed's 5e-5 when every weight trains; 1e-3 for a linear probe on a frozen tower (as foundation.py)
FULL_LR, PROBE_LR = 5e-5, 1e-3


def part(name: str, algorithm: str, settings: dict[str, Any], model: str = OPENAI_B16) -> Part:
    return Part(name, FIVE, (algorithm,), (model,), pretrained=CLIP_FULL.key, settings={**TEXT, **settings},
                n_hparams=1, n_trials=3)


def row(label: str, algorithm: str, part_name: str, model: str = OPENAI_B16) -> Row:
    return Row(label, algorithm, model, tuple(Cell(d) for d in FIVE), part=part_name, added=NO_NUMBER)


def imagenet_part(name: str, algorithm: str, settings: dict[str, Any]) -> Part:
    """Trained on ImageNet, every evaluation set held out in one run (the catalogue's evaluation domains), 1
    hparams setting x 3 trials, the head from OpenAI's 80 ImageNet templates (CLIP's, WiSE-FT's and FLYP's
    zero-shot classifier)."""
    return Part(name, (IMAGENET,), (algorithm,), (OPENAI_B16,), pretrained=CLIP_FULL.key,
                settings={**TEXT, "prompt_templates": "openai_imagenet", **settings}, n_hparams=1, n_trials=3)


def imagenet_row(label: str, algorithm: str, part_name: str) -> Row:
    """A row of the ImageNet table: the in-distribution validation accuracy and each shift's."""
    return Row(label, algorithm, OPENAI_B16, tuple(Cell(IMAGENET, d) for d in IMAGENET_COLUMNS), part=part_name,
               added=NO_NUMBER)


def wise_ft(label: str, part_name: str, zero_shot: str, model: str = OPENAI_B16) -> Row:
    """WiSE-FT of a part's runs: a soup made after the launch (listed, not launched), with its exact command."""
    return Row(label, "ERM", model,
               unavailable=f"a soup of two runs, made after the launch: {soup_command(part_name, zero_shot)}")


def soup_command(part_name: str, zero_shot: str) -> str:
    """WiSE-FT of `part_name`'s fine-tuned runs against the run of the part `zero_shot` (the same architecture at
    step 0) that holds out the same domains with the same trial seed; alpha chosen on training-domain validation,
    the whole curve in the table."""
    return (f"`dgmoe soup OUT/{part_name} --method wise-ft --zero-shot OUT/{zero_shot}/<its run of the same "
            "dataset, held-out domain and trial>`, one per held-out domain and trial (OUT: the launch's --output-dir)")


DOMAINBED = Recipe(
    "clip-robust-domainbed", "Robust fine-tuning of CLIP (zero-shot, LP, FT, LP-FT, WiSE-FT, FLYP, CLIPood)",
    "dgmoe's baselines", "CLIP ViT-B/16 with text-initialised heads on DomainBed, train-validation selection",
    "domainbed",
    rows=(row("zero-shot CLIP (ViT-B/16)", "ERM", "zero-shot"),
          row("linear probe, text-initialised (ViT-B/16)", "ERM", "linear-probe"),
          row("full fine-tune, text-initialised (ViT-B/16)", "ERM", "fine-tune"),
          row("LP-FT (ViT-B/16)", "LPFT", "lp-ft"),
          row("FLYP (ViT-B/16)", "FLYP", "flyp"),
          row("CLIPood (ViT-B/16)", "CLIPood", "clipood"),
          row("GMoE, text-initialised (ViT-B/16)", "ERM", "gmoe", GMOE_B16),
          row("adapter experts, text-initialised (ViT-B/16)", "ERM", "adapter-experts"),
          row("GMoE at step 0, text head (WiSE-FT's alpha 0)", "ERM", "zero-shot-gmoe", GMOE_B16),
          row("adapter experts at step 0, text head (WiSE-FT's alpha 0)", "ERM", "zero-shot-adapter-experts"),
          imagenet_row("zero-shot CLIP, ImageNet -> shifts", "ERM", "imagenet-zero-shot"),
          imagenet_row("linear probe, ImageNet -> shifts", "ERM", "imagenet-linear-probe"),
          imagenet_row("full fine-tune, ImageNet -> shifts", "ERM", "imagenet-fine-tune"),
          imagenet_row("LP-FT, ImageNet -> shifts", "LPFT", "imagenet-lp-ft"),
          imagenet_row("FLYP, ImageNet -> shifts", "FLYP", "imagenet-flyp"),
          imagenet_row("CLIPood, ImageNet -> shifts", "CLIPood", "imagenet-clipood"),
          wise_ft("WiSE-FT of the fine-tune (ViT-B/16)", "fine-tune", "zero-shot"),
          wise_ft("WiSE-FT of the fine-tune, ImageNet -> shifts", "imagenet-fine-tune", "imagenet-zero-shot"),
          wise_ft("WiSE-FT of GMoE (ViT-B/16)", "gmoe", "zero-shot-gmoe", GMOE_B16),
          wise_ft("WiSE-FT of adapter experts (ViT-B/16)", "adapter-experts", "zero-shot-adapter-experts")),
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
           imagenet_part("imagenet-zero-shot", "ERM", {"steps": 0}),
           imagenet_part("imagenet-linear-probe", "ERM", {"peft": "linear", "hparams": {"lr": PROBE_LR}}),
           imagenet_part("imagenet-fine-tune", "ERM", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           imagenet_part("imagenet-lp-ft", "LPFT", {"peft": "full", "hparams": {"lr": FULL_LR, "linear_lr": PROBE_LR}}),
           imagenet_part("imagenet-flyp", "FLYP", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           imagenet_part("imagenet-clipood", "CLIPood", {"peft": "full", "hparams": {"lr": FULL_LR}})),
    weights=(CLIP_FULL,),
    notes=("Heads: every row's head is CLIP's zero-shot classifier of the class names (prompt 'a photo of a {}.', "
           "CLIPood's); zero-shot evaluates it untrained (--steps 0), the others train from it.",
           "Published numbers: not entered (see the module docstring); the rows are dgmoe's obtained numbers.",
           "Learning rates: DomainBed's 5e-5 when the tower trains, 1e-3 for the linear probe and LP-FT's probe; "
           "every other hparam dgmoe's default; CLIPood's Beta moving average spans each run's own steps.",
           "GMoE and adapter experts: GMoE's tower is trained whole at 5e-5 (as the fine-tune row), the adapter "
           "experts on the frozen tower at 1e-3 (the foundation recipe's); at the smoke scale GMoE runs on the "
           "CLIP-shaped micro stand-in's GMoE twin with its micro text tower.",
           "WiSE-FT (post-hoc, after the launch): "
           + "; ".join(f"{f}: {soup_command(f, z)}" for f, z in (("fine-tune", "zero-shot"), ("gmoe", "zero-shot-gmoe"),
                                                              ("adapter-experts", "zero-shot-adapter-experts")))
           + ". The soups need each run's weights: the smoke scale does not keep them (--skip-model-save).",
           "ImageNet -> shifts (WiSE-FT's and FLYP's evaluation): the same methods trained on ImageNet with every "
           "evaluation set held out in one run (ImageNet-val, -V2, -R, -Sketch, -A, ObjectNet, R's, A's and "
           "ObjectNet's classes through their class maps); the head from OpenAI's 80 ImageNet templates; the "
           "catalogue's schedule (10,001 steps of batch 32, not the papers' epochs: pass --steps to match one); "
           "each cell the whole held-out set's accuracy at the checkpoint training-domain validation picks, as "
           "`dgmoe results`' shift table, which adds effective robustness given --shift-fit. At the smoke scale it "
           "runs on stand-in folders of the suite the launch writes.",
           "Selection: training-domain validation, DomainBed's default."))

RECIPES = (DOMAINBED,)
