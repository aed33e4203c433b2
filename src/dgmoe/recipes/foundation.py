"""Foundation backbones on DomainBed (issue 25's table): zero-shot CLIP, CLIP-Adapter, MIRO + SWAD on SWAG
RegNetY-16GF and MoA (a mixture of adapters with a router, WACV 2025) on the five DomainBed datasets, with
dgmoe's CLIP-Adapter-style and MoA-style runs and its own linear-probe and full fine-tune baselines on CLIP
ViT-B/16 and DINOv2 ViT-B/14, which have no published number (obtained only).

The published numbers are the issue's table, as the methods' papers print them (averages over the held-out
domains; the table's avg column is not entered). The rows dgmoe runs keep DomainBed's protocol: one hparams
setting (the defaults with the part's overrides) x 3 trials, batch 32 per domain, the catalogue's steps
(5,001; DomainNet 15,001), training-domain validation; the PEFT modes and their knobs are `dgmoe train
--peft ...` (`dgmoe.models.peft`, docs/design.md "Parameter-efficient training"). Where the papers leave a
setting open, the recipe's notes (and docs/design.md, "Foundation recipes") say what dgmoe runs.
"""
from __future__ import annotations

from typing import Any

from dgmoe.recipes.base import Cell, Part, Recipe, Row, Weights, cells
from dgmoe.recipes.gmoe import FIVE

PAPER = "Foundation backbones on DomainBed (the 2021-25 literature, dgmoe issue 25)"
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
#: MoA-style: GMoE's choices moved onto adapters: 6 adapter experts (width 64) per block, top-2, cosine router,
#: in GMoE's last-two blocks (8 and 10 of 12)
ADAPTER_EXPERTS: dict[str, Any] = {"peft": "adapter_experts", "peft_bottleneck": 64, "peft_experts": 6,
                                   "peft_top_k": 2, "peft_router": "cosine", "hparams": {"lr": PEFT_LR}}
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
    "foundation-domainbed", PAPER, "issue 25's table",
    "CLIP / DINOv2 backbones, adapters and adapter experts on DomainBed, train-validation selection", "domainbed",
    rows=(Row("zero-shot CLIP (ViT-B/16)", "ERM", OPENAI_B16, cells(FIVE, "96.1 82.4 71.5 34.2 56.8"),
              quoted="CLIP (Radford et al., ICML 2021), as the DG literature reports it",
              unavailable="zero-shot classification needs CLIP's text tower (class-name prompts); dgmoe builds "
                          "image towers only"),
          Row("CLIP-Adapter (ViT-B/16)", "ERM", OPENAI_B16, cells(FIVE, "96.4 84.3 82.2 57.5 59.9"),
              part="clip-adapter", quoted="CLIP-Adapter (Gao et al., IJCV 2024); dgmoe runs its adapter style"),
          Row("MIRO + SWAD (SWAG RegNetY-16GF)", "MIRO", "regnety_16gf", cells(FIVE, "96.8 81.7 83.3 64.3 60.7"),
              quoted="MIRO (Cha et al., ECCV 2022)",
              unavailable="dgmoe has no RegNet backbone (nor SWAG's weights); MIRO and SWAD run on its ViTs"),
          Row("MoA (OpenCLIP ViT-B/16)", "ERM", OPENCLIP_B16, cells(FIVE, "97.4 83.1 90.6 52.8 62.7"),
              part="moa", quoted="MoA, mixture of adapters with a router (WACV 2025; code not released); dgmoe "
                                 "runs its adapter experts"),
          own("linear probe (CLIP ViT-B/16)", OPENAI_B16, "clip-linear"),
          own("full fine-tune (CLIP ViT-B/16)", OPENAI_B16, "clip-full"),
          own("linear probe (DINOv2 ViT-B/14)", DINOV2_B14, "dinov2-linear"),
          own("full fine-tune (DINOv2 ViT-B/14)", DINOV2_B14, "dinov2-full")),
    parts=(part("clip-adapter", OPENAI_B16, "clip_b16_openai", ADAPTER),
           part("moa", OPENCLIP_B16, "clip_b16_openclip", ADAPTER_EXPERTS),
           part("clip-linear", OPENAI_B16, "clip_b16_openai", LINEAR),
           part("clip-full", OPENAI_B16, "clip_b16_openai", FULL),
           part("dinov2-linear", DINOV2_B14, "dinov2_b14", LINEAR),
           part("dinov2-full", DINOV2_B14, "dinov2_b14", FULL)),
    weights=(CLIP_OPENAI, CLIP_OPENCLIP, DINOV2),
    notes=("Zero-shot CLIP and MIRO + SWAD are quoted only: dgmoe has no text tower (zero-shot prompts) and no "
           "RegNet/SWAG backbone.",
           "Classifier: CLIP-Adapter and MoA classify with CLIP's text embeddings of the class names; dgmoe has no "
           "text tower, so every row trains a linear head on the tower's image embedding (CLIP: the 512-d "
           "projection; DINOv2: the class token), initialised at random.",
           "CLIP-Adapter-style: CLIP-Adapter adds one 2-layer adapter (reduction 4) on the final image feature "
           "and blends it with the frozen feature by a residual ratio (alpha 0.2); dgmoe runs `--peft adapter`: a "
           "bottleneck adapter (width 64, zero-initialised up-projection) in parallel with every block's FFN, with "
           "no fixed ratio (the adapter's scale is learned from zero).",
           "MoA-style: MoA's experts, top-k and blocks are not public; dgmoe runs `--peft adapter_experts` with "
           "GMoE's choices: 6 adapter experts (width 64) per block, top-2, cosine router, GMoE's last-two blocks "
           "(8 and 10 of 12), its balance loss.",
           "Learning rate: DomainBed's 5e-5 for full fine-tuning; 1e-3 for the linear probes, adapters and adapter "
           "experts (the frozen backbone's few new weights); every other hparam dgmoe's ViT default (Adam, batch "
           "32 per domain, weight decay 0, drop path 0.1), 1 hparams setting x 3 trials, the catalogue's steps.",
           "OpenCLIP ViT-B/16 weights: MoA does not say which pretraining; dgmoe expects LAION-2B "
           "(laion2b_s34b_b88k). OpenAI's .pt release is a TorchScript archive: save its state dict first.",
           "Selection: training-domain validation, DomainBed's default; the rows' sources do not all say theirs."))

RECIPES = (DOMAINBED,)
