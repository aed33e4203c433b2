"""What a registered model is, in one line, read from its meta-device build (no weights, no initialisation):
its family and paper, its sparse layout and routing, and its parameter count (in total, and trainable under
each parameter-efficient mode: `peft_counts`). `dgmoe models` prints it and the quickstart announces its runs
with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch.nn as nn

from dgmoe.models.info import ModelInfo, build_on_meta, model_info
from dgmoe.models.layout import Layout, resolve_layout, sparse_blocks

#: architecture name prefix -> (family label, paper); the longest matching prefix wins.
FAMILIES: dict[str, tuple[str, str]] = {
    "vit": ("ViT", "Dosovitskiy et al., ICLR 2021"),
    "vit_small_r26": ("hybrid ViT (ResNet-26 stem)", "Dosovitskiy et al., ICLR 2021"),
    "vit_le": ("ERM+LE", "MoGE Table 1, after D3G"),
    "deit": ("DeiT", "Touvron et al., ICML 2021"),
    "gmoe": ("GMoE", "Li et al., ICLR 2023"),
    "sfmoe": ("SF-MoE", "Li et al., arXiv 2022"),
    "hybrid_sfmoe": ("Hybrid SF-MoE (ResNet-26 stem)", "Li et al., arXiv 2022"),
    "moge": ("MoGE", "Rangzan et al., GCPR 2026"),
    "resnet": ("ResNet", "He et al., CVPR 2016"),
}


@dataclass(frozen=True)
class ModelSummary:
    """A registered model at a glance: its `ModelInfo`, parameter count and one-line description."""

    name: str
    info: ModelInfo
    num_params: int
    family: str
    structure: str
    paper: str

    @property
    def description(self) -> str:
        return f"{self.family}: {self.structure}; {self.paper}"


def family_of(name: str, info: ModelInfo | None = None) -> tuple[str, str]:
    """(family label, paper) of an architecture name; for a name no prefix of `FAMILIES` matches, what its
    `ModelInfo` says (a sparse or dense ViT, a ResNet), or ('?', '') without one."""
    matches = [prefix for prefix in FAMILIES
               if name.startswith(prefix) and name[len(prefix):len(prefix) + 1] in ("", "_", *"0123456789")]
    if matches:
        return FAMILIES[max(matches, key=len)]
    if info is None:
        return "?", ""
    kind = {"vit": "ViT", "resnet": "ResNet"}.get(info.family, info.family)
    routed = "metadata-routed sparse " if info.uses_metadata else ("sparse " if info.sparse is not None else "")
    return f"{routed}{kind}" if routed else kind, ""


def compact_layout(layout: Sequence[str]) -> str:
    """'S'/'F' letters in the papers' notation, e.g. `[F]x8,[S,F]x2` or `[S,F]x6`: at each position the
    repeated group that covers the most blocks (the shortest group on a tie), else the single letter."""
    parts, i = [], 0
    while i < len(layout):
        best = (0, 1, 1)  # (blocks covered, -unit length, repeats)
        for unit in range(1, min(4, len(layout) - i) + 1):
            unit_letters, repeats = tuple(layout[i:i + unit]), 1
            while tuple(layout[i + repeats * unit:i + (repeats + 1) * unit]) == unit_letters:
                repeats += 1
            if repeats > 1 or unit == 1:  # a group written once is just its letters
                best = max(best, (unit * repeats, -unit, repeats))
        covered, unit, repeats = best[0], -best[1], best[2]
        group = ",".join(layout[i:i + unit])
        parts.append(f"[{group}]x{repeats}" if repeats > 1 else group)
        i += covered
    return ",".join(parts)


def _sparse_text(info: ModelInfo, depth: int) -> str:
    cfg = info.sparse
    assert cfg is not None
    blocks = info.sparse_blocks
    if blocks == sparse_blocks(resolve_layout("last-two", depth)):
        where = f"MoE in last-two blocks ({', '.join(map(str, blocks))} of {depth})"
    else:
        layout: Layout = tuple("S" if i in blocks else "F" for i in range(depth))
        where = f"blocks {compact_layout(layout)} (S: MoE)"
    routing = f"{cfg.num_experts} experts top-{cfg.top_k} {cfg.router}"
    if cfg.routing == "image":
        routing += " routed per image on location"
    if cfg.shared_expert:
        routing += " + a shared expert"
    return f"{where}, {routing}"


def structure_of(model: nn.Module, info: ModelInfo) -> str:
    """The architecture in a few words: stages for a ResNet; depth, width and sparse layout for a ViT."""
    if info.family == "resnet":
        stages = "-".join(str(len(getattr(model, f"layer{i}"))) for i in range(1, 5))
        return f"bottleneck stages {stages}"
    depth, width = len(getattr(model, "blocks")), getattr(model, "embed_dim")
    text = f"{depth} blocks, width {width}, "
    text += _sparse_text(info, depth) if info.is_sparse else "dense"
    if getattr(model, "le_dim", 0):
        text += ", location embedding concatenated before the head"
    return text


def summarize_model(name: str) -> ModelSummary:
    """The `ModelSummary` of a registered model at its defaults, from a meta-device build (fast)."""
    model = build_on_meta(name)
    info = model_info(model)
    family, paper = family_of(name, info)
    if info.tower is not None:  # a foundation model's tower: dense, it is that tower; sparse, built on it
        family, paper = (f"{family} on {info.tower[0]}", paper) if info.is_sparse else info.tower
    if family == "ResNet":
        family = f"ResNet-{3 * sum(len(getattr(model, f'layer{i}')) for i in range(1, 5)) + 2}"
    return ModelSummary(name, info, sum(p.numel() for p in model.parameters()), family,
                        structure_of(model, info), paper)


def peft_counts(name: str, mode: str) -> tuple[int, int] | None:
    """(total, trainable) parameters of a registered model at its defaults under PEFT `mode` (its default
    knobs), from a meta-device build; None where the mode does not apply (LoRA or adapters on a ResNet)."""
    from dgmoe.errors import UsageError
    from dgmoe.models.peft import parameter_counts

    try:
        return parameter_counts(build_on_meta(name, peft={"mode": mode}))
    except UsageError:
        return None
