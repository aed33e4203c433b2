"""Foundation backbones on DomainBed: zero-shot CLIP, CLIP-Adapter, MIRO + SWAD on SWAG RegNetY-16GF and MoA
(mixture of adapters, Lee et al., WACV 2025; run as its released code runs it) on the five DomainBed datasets,
with dgmoe's CLIP-Adapter-style run, its GMoE-flavoured adapter experts and its own linear-probe and full
fine-tune baselines on CLIP ViT-B/16 and DINOv2 ViT-B/14, which have no published number (obtained only).

Each published row is one row of its own paper's table, cited by paper, table and row in `Row.quoted` and
checked against that table as its authors' repository shows it (the per-dataset averages over the held-out
domains; the tables' avg column is not entered). A row whose numbers could not be checked against a primary
table says so. The rows dgmoe runs keep DomainBed's protocol: one hparams setting (the defaults with the part's
overrides) x 3 trials, batch 32 per domain, the catalogue's steps (5,001; DomainNet 15,001), training-domain
validation; the PEFT modes and their knobs are `dgmoe train --peft ...` (`dgmoe.models.peft`, docs/design.md
"Parameter-efficient training"). Where the papers leave a setting open, the recipe's notes (and docs/design.md,
"Foundation recipe") say what dgmoe runs.
"""
from __future__ import annotations

from typing import Any

from dgmoe.recipes import sources
from dgmoe.recipes.base import Cell, Part, Recipe, Row, Weights, cells
from dgmoe.recipes.gmoe import FIVE
from dgmoe.recipes.sources import MOA_CODE

PAPER = "Foundation backbones on DomainBed (DPL, MIRO, MoA and CLIP-Adapter rows, each from its own paper)"
OPENAI_B16, OPENCLIP_B16 = "vit_base_patch16_clip_quickgelu_224", "vit_base_patch16_clip_224"
DINOV2_B14 = "vit_base_patch14_dinov2"
CLIP_OPENAI = Weights("clip_b16_openai", "vit_base_patch16_clip_quickgelu_224.openai.safetensors",
                      "OpenAI CLIP ViT-B/16 image tower: timm vit_base_patch16_clip_quickgelu_224.openai, HF "
                      "openai/clip-vit-base-patch16, or OpenAI's ViT-B-16.pt saved as a state dict")
CLIP_OPENCLIP = Weights("clip_b16_openclip", "vit_base_patch16_clip_224.laion2b.safetensors",
                        "OpenCLIP ViT-B/16 image tower: open_clip ViT-B-16 laion2b_s34b_b88k "
                        "(open_clip_pytorch_model.bin) or timm vit_base_patch16_clip_224.laion2b")
DINOV2 = Weights("dinov2_b14", "dinov2_vitb14_pretrain.pth",
                 "DINOv2 ViT-B/14 (facebookresearch/dinov2 hub dinov2_vitb14_pretrain.pth, or timm "
                 "vit_base_patch14_dinov2.lvd142m)")

#: dgmoe's learning rates: DomainBed's 5e-5 when every weight trains; 1e-3 for the few new weights on a frozen
#: backbone (linear probe, adapters, adapter experts)
FULL_LR, PEFT_LR = 5e-5, 1e-3
#: CLIP-Adapter-style: a bottleneck adapter (width 64) in parallel with the FFN of every block
ADAPTER: dict[str, Any] = {"peft": "adapter", "peft_bottleneck": 64, "hparams": {"lr": PEFT_LR}}
#: dgmoe's GMoE-flavoured adapter experts: GMoE's choices moved onto adapters: 6 bottleneck experts (width 64)
#: per block, top-2, cosine router, in GMoE's last-two blocks (8 and 10 of 12)
ADAPTER_EXPERTS: dict[str, Any] = {"peft": "adapter_experts", "peft_bottleneck": 64, "peft_experts": 6,
                                   "peft_top_k": 2, "peft_router": "cosine", "hparams": {"lr": PEFT_LR}}
#: MoA as its code runs it (cvlab-kaist/MoA ed7bc9d, `--model nf_vitbase_moek_every_qkv_new --l_aux`): `--peft
#: moa`'s experts, placement, gate and loss (`dgmoe.models.peft`) and hparams (its registry's lr 5e-5, Adam,
#: batch 32, weight decay 0; timm's ViT without stochastic depth: `--peft moa`'s drop path default is 0)
MOA: dict[str, Any] = {"peft": "moa", "hparams": {"lr": FULL_LR}}
LINEAR: dict[str, Any] = {"peft": "linear", "hparams": {"lr": PEFT_LR}}
FULL: dict[str, Any] = {"peft": "full", "hparams": {"lr": FULL_LR}}
NO_NUMBER = "dgmoe's own baseline: no published number (obtained only)"


def part(name: str, model: str, weights: str, settings: dict[str, Any]) -> Part:
    """One sweep of the five datasets: ERM on `model` from `weights` with `settings`, 1 hparams setting x 3."""
    return Part(name, FIVE, ("ERM",), (model,), pretrained=weights, settings=settings, n_hparams=1, n_trials=3)


def own(label: str, model: str, part_name: str) -> Row:
    """A baseline row dgmoe adds: every dataset's average obtained, none published."""
    return Row(label, "ERM", model, tuple(Cell(d) for d in FIVE), part=part_name, added=NO_NUMBER)


DOMAINBED = Recipe(
    "foundation-domainbed", PAPER, "DPL Table 1, MIRO Table 1, MoA's results table",
    "CLIP / DINOv2 backbones, adapters and adapter experts on DomainBed, train-validation selection", "domainbed",
    rows=(Row("zero-shot CLIP (ViT-B/16)", "ERM", OPENAI_B16, cells(FIVE, sources.DPL_ZERO_SHOT.numbers),
              quoted=sources.ZERO_SHOT_CLIP,
              unavailable="zero-shot classification needs CLIP's text tower and this recipe's weights are image "
                          "towers: the clip-robust-domainbed recipe runs it (its zero-shot part)"),
          Row("CLIP-Adapter (ViT-B/16)", "ERM", OPENAI_B16, cells(FIVE, "96.4 84.3 82.2 57.5 59.9"),
              part="clip-adapter", quoted=sources.CLIP_ADAPTER + "; dgmoe runs its adapter style"),
          Row("MIRO + SWAD (SWAG RegNetY-16GF)", "MIRO", "regnety_16gf",
              cells(FIVE, "96.8±0.2 81.7±0.1 83.3±0.1 64.3±0.3 60.7±0.0"), quoted=sources.MIRO_SWAD_SWAG,
              unavailable="dgmoe has no RegNet backbone (nor SWAG's weights); MIRO and SWAD run on its ViTs"),
          Row("MoA (OpenCLIP ViT-B/16)", "ERM", OPENCLIP_B16,
              cells(FIVE, "97.4±0.2 83.1±0.3 90.6±0.0 52.8±1.4 62.7±0.1"), part="moa",
              quoted=f"{sources.MOA}; dgmoe runs its code's configuration ({MOA_CODE})"),
          own("adapter experts, GMoE's choices (OpenCLIP ViT-B/16)", OPENCLIP_B16, "gmoe-adapter-experts"),
          own("linear probe (CLIP ViT-B/16)", OPENAI_B16, "clip-linear"),
          own("full fine-tune (CLIP ViT-B/16)", OPENAI_B16, "clip-full"),
          own("linear probe (DINOv2 ViT-B/14)", DINOV2_B14, "dinov2-linear"),
          own("full fine-tune (DINOv2 ViT-B/14)", DINOV2_B14, "dinov2-full")),
    parts=(part("clip-adapter", OPENAI_B16, "clip_b16_openai", ADAPTER),
           part("moa", OPENCLIP_B16, "clip_b16_openclip", MOA),
           part("gmoe-adapter-experts", OPENCLIP_B16, "clip_b16_openclip", ADAPTER_EXPERTS),
           part("clip-linear", OPENAI_B16, "clip_b16_openai", LINEAR),
           part("clip-full", OPENAI_B16, "clip_b16_openai", FULL),
           part("dinov2-linear", DINOV2_B14, "dinov2_b14", LINEAR),
           part("dinov2-full", DINOV2_B14, "dinov2_b14", FULL)),
    weights=(CLIP_OPENAI, CLIP_OPENCLIP, DINOV2),
    notes=("Zero-shot CLIP and MIRO + SWAD are quoted only: this recipe loads image towers (zero-shot needs the "
           "text tower: clip-robust-domainbed runs it) and dgmoe has no RegNet/SWAG backbone.",
           "Sources: each published row cites its paper, table and row (`recipe show`, Rows) and was checked against "
           "that table in its authors' repository, except CLIP-Adapter's, whose source table is not recorded (its "
           "cells are unchecked). +/- as MIRO's and MoA's tables print them (their captions were not read here).",
           "Zero-shot CLIP: DPL Table 1 has no DomainNet column. CLIPood's zero-shot row on all five datasets (its "
           "own test split, quoted) is entered and run in the clip-robust-domainbed recipe: `dgmoe recipe show "
           "clip-robust-domainbed`. dgmoe's zero-shot prompt is 'a photo of a {}.'.",
           "Classifier: CLIP-Adapter classifies with CLIP's text embeddings of the class names; MoA's code trains a "
           "linear head (DomainBed's ERM nn.Linear) on the 768-d class token, timm's projection head replaced by "
           "an identity. dgmoe's rows train a linear head, initialised at random, on the tower's image embedding "
           "(CLIP: the 512-d output of the frozen projection; DINOv2: the class token): for MoA a deliberate "
           "difference of the head's input only (the adapters, routers and rule: 1,485,830 parameters, MoA's "
           "1,494,022 less the second rule pair its model registers and never reads).",
           "CLIP-Adapter-style: CLIP-Adapter adds one 2-layer adapter (reduction 4) on the final image feature "
           "and blends it with the frozen feature by a residual ratio (alpha 0.2); dgmoe runs `--peft adapter`: a "
           "bottleneck adapter (width 64, zero-initialised up-projection) in parallel with every block's FFN, with "
           "no fixed ratio (the adapter's scale is learned from zero).",
           f"MoA: its code ({MOA_CODE}: domainbed/networks/backbones.py, domainbed/models/lora/lora_util.py, "
           "domainbed/algorithms/algorithms.py, domainbed/hparams_registry.py, config.yaml; its best result, "
           "`--model nf_vitbase_moek_every_qkv_new --l_aux`) freezes the tower and adds to the attention's qkv "
           "projection of every second block (0, 2, ..., 10) 4 KAdaptation (Kronecker / PHM, phm_dim 64, one rule "
           "shared by all layers, dropout 0.5 on each expert's weight) experts of ranks 1, 2, 4, 8, routed per "
           "token by GMoE's cosine gate (projection 256, temperature 0.5) to the top-1 of the noisy softmax (noise "
           "1/4), with a balance loss weighted 0.01 summed over the layers; ERM, Adam, lr 5e-5, batch 32 per "
           "domain, no SWAD. dgmoe's `--peft moa` is that layer (tests/parity/test_moa_parity.py: MoA's own module, "
           "outputs and gradients equal), with drop path 0 and lr 5e-5 here.",
           "Adapter experts, GMoE's choices: dgmoe's own row, no published number: `--peft adapter_experts` with 6 "
           "bottleneck experts (width 64) per block beside the FFN, top-2, cosine router, GMoE's last-two blocks "
           "(8 and 10 of 12), GMoE's balance loss, lr 1e-3.",
           "Learning rate: DomainBed's 5e-5 for full fine-tuning and MoA; 1e-3 for the linear probes, adapters and "
           "GMoE-style adapter experts (the frozen backbone's few new weights); every other hparam dgmoe's ViT "
           "default (Adam, batch 32 per domain, weight decay 0, drop path 0.1 but MoA's 0), 1 hparams setting x 3 "
           "trials, the catalogue's steps.",
           "OpenCLIP ViT-B/16 weights: LAION-2B, as MoA's README names them (timm vit_base_patch16_clip_224."
           "laion2b). OpenAI's .pt release is a TorchScript archive: save its state dict first.",
           "Selection: training-domain validation, DomainBed's default; the rows' sources do not all say theirs."))

RECIPES = (DOMAINBED,)
