"""The robust fine-tuning baselines of CLIP on DomainBed's five datasets: zero-shot, linear probe, full
fine-tuning, LP-FT, FLYP and CLIPood on CLIP ViT-B/16 (OpenAI), every head initialised from the class names'
text embeddings (`--head zeroshot`, prompt "a photo of a {}.").

dgmoe's rows only, for now: the published numbers of these methods on DomainBed are not entered, because the
papers' own tables could not be read and checked here (later papers quote CLIPood's, but a recipe cites the
paper's own table and row). One primary table was checked: DPL (Zhang et al., arXiv 2111.12853) Table 1, row
'CLIP (template prompt)', zero-shot CLIP ViT-B/16 on four of the five datasets (the foundation-domainbed recipe
quotes it); it has no DomainNet cell, and a cell without a value reads as a value the paper only plots, so it
is not entered here. WiSE-FT is made after the launch by `dgmoe soup RUNS
--method wise-ft --zero-shot RUNS/zero-shot/...` (a soup of two runs, which a recipe part does not launch), so
its row is listed, not launched. DomainBed's protocol otherwise: one hparams setting x 3 trials, the catalogue's
steps, training-domain validation.
"""
from __future__ import annotations

from typing import Any

from dgmoe.recipes.base import Cell, Part, Recipe, Row, Weights
from dgmoe.recipes.gmoe import FIVE

OPENAI_B16 = "vit_base_patch16_clip_quickgelu_224"
CLIP_FULL = Weights("clip_b16_openai_full", "ViT-B-16.openai.state_dict.pt",
                    "OpenAI CLIP ViT-B/16, both towers: OpenAI's ViT-B-16.pt saved as a state dict, open_clip's "
                    "ViT-B-16 openai weights, or Hugging Face openai/clip-vit-base-patch16 (CLIPModel)")
NO_NUMBER = "dgmoe's row: the published number is not entered (not checked against the paper's table here)"
TEXT: dict[str, Any] = {"head": "zeroshot", "prompt_templates": "domainbed"}
#: DomainBed's 5e-5 when every weight trains; 1e-3 for a linear probe on a frozen tower (as foundation.py)
FULL_LR, PROBE_LR = 5e-5, 1e-3


def part(name: str, algorithm: str, settings: dict[str, Any]) -> Part:
    return Part(name, FIVE, (algorithm,), (OPENAI_B16,), pretrained=CLIP_FULL.key, settings={**TEXT, **settings},
                n_hparams=1, n_trials=3)


def row(label: str, algorithm: str, part_name: str) -> Row:
    return Row(label, algorithm, OPENAI_B16, tuple(Cell(d) for d in FIVE), part=part_name, added=NO_NUMBER)


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
          Row("WiSE-FT of the fine-tune (ViT-B/16)", "ERM", OPENAI_B16,
              unavailable="a soup of two runs: `dgmoe soup RUNS --method wise-ft --zero-shot <a zero-shot run>` "
                          "after the launch, one per held-out domain and trial")),
    parts=(part("zero-shot", "ERM", {"steps": 0}),
           part("linear-probe", "ERM", {"peft": "linear", "hparams": {"lr": PROBE_LR}}),
           part("fine-tune", "ERM", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           part("lp-ft", "LPFT", {"peft": "full", "hparams": {"lr": FULL_LR, "linear_lr": PROBE_LR}}),
           part("flyp", "FLYP", {"peft": "full", "hparams": {"lr": FULL_LR}}),
           part("clipood", "CLIPood", {"peft": "full", "hparams": {"lr": FULL_LR}})),
    weights=(CLIP_FULL,),
    notes=("Heads: every row's head is CLIP's zero-shot classifier of the class names (prompt 'a photo of a {}.', "
           "CLIPood's); zero-shot evaluates it untrained (--steps 0), the others train from it.",
           "Published numbers: not entered (see the module docstring); the rows are dgmoe's obtained numbers.",
           "Learning rates: DomainBed's 5e-5 when the tower trains, 1e-3 for the linear probe and LP-FT's probe; "
           "every other hparam dgmoe's default; CLIPood's clipood_steps is its default 5001, the catalogue's "
           "DomainBed schedule (DomainNet's 15001 steps would need it set).",
           "Selection: training-domain validation, DomainBed's default."))

RECIPES = (DOMAINBED,)
