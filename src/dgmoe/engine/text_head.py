"""A run's CLIP text side: the text tower that goes with its image tower, the head identity it starts from, and
what writes the zero-shot classifier (`--head zeroshot`), each checked before anything is written."""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.class_matching import match_class_names, prompt_class_names
from dgmoe.engine.config import RunConfig
from dgmoe.engine.provenance import pretrained_identity
from dgmoe.errors import UsageError
from dgmoe.models.clip.templates import TEMPLATE_SETS, templates
from dgmoe.models.info import ModelInfo, set_info
from dgmoe.seeding import seed_hash

log = logging.getLogger("dgmoe")


def run_text_tower(cfg: RunConfig, info: ModelInfo) -> Any:
    """The run's CLIP text tower (a `dgmoe.models.clip.text_tower.TextTransformer`): the one that goes with the image
    tower `info`, read from --text-pretrained or --pretrained; a stand-in image tower without weights gets its
    text tower's seeded random initialisation (tests, smoke runs). One-line errors for a tower that is not CLIP's,
    a missing file, a file without a text tower."""
    from dgmoe.models.clip.text_formats import NoTextTowerError, load_text_tower
    from dgmoe.models.clip.text_tower import STAND_INS, TextTransformer, text_config
    from dgmoe.names import weights_help

    model = cfg.model
    base = text_config(info.tower, model.name)
    source = model.text_pretrained or model.pretrained
    if source is not None:
        try:
            return load_text_tower(base, source)
        except NoTextTowerError as e:  # an image tower's file (timm's): say where the full CLIP file comes from
            raise NoTextTowerError(f"{e}. {weights_help(model.name)}") from None
    if info.tower is None or info.tower[0] not in STAND_INS:
        raise UsageError(f"--head zeroshot needs CLIP's text tower: give --pretrained (a full CLIP file) or "
                         f"--text-pretrained for --model {model.name}. {weights_help(model.name)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_hash(cfg.seeds.seed, "text tower"))
        return TextTransformer(base)


def head_identity(cfg: RunConfig, dataset: str, classes: Sequence[str]) -> dict[str, Any]:
    """The classifier head a run starts from, beside its `initialisation` (recorded in config.json as "head" when
    the run starts): its kind and, for CLIP's zero-shot head, the prompt templates (a set's name, or the file's name
    and content hash: `pretrained_identity`), the class names the prompts give (`prompt_class_names`) and the text
    tower that encoded them (its file's name and content hash, or the stand-in's seed). Weights averaged or
    interpolated (WiSE-FT's zero-shot theta_0 and the run fine-tuned from it) must share it."""
    model = cfg.model
    if model.head != "zeroshot":
        return {"kind": model.head}
    given = model.prompt_templates
    source = model.text_pretrained or model.pretrained
    return {"kind": model.head,
            "templates": given if given in TEMPLATE_SETS else pretrained_identity(given),
            "class_names": list(prompt_class_names(dataset, tuple(classes))),
            "text_tower": pretrained_identity(source) or f"seeded random text tower, seed {cfg.seeds.seed}"}


def text_head_source(cfg: RunConfig, info: ModelInfo, dataset: MultiDomainDataset) -> Callable[[nn.Module], None]:
    """For `--head zeroshot`: everything checked (a CLIP tower, the text tower's file, the templates, the class
    names) before the network is built; returns what writes CLIP's zero-shot classifier into it."""
    from dgmoe.models.clip.zero_shot import init_text_head

    matched = match_class_names(dataset.name, dataset.classes)  # each label's own name, in the loader's order
    if matched.renamed:
        log.info(f"{dataset.name}: class folders matched to the catalogue's class names by case and _/-/space, "
                 f"the prompts name them so: {matched.mapping()}")
    names = matched.names
    prompts = templates(cfg.model.prompt_templates)
    tower = run_text_tower(cfg, info)

    report = getattr(tower, "load_report", None)
    said = report.summary() if report is not None else "the stand-in's seeded random text tower (no weights exist)"

    def write(network: nn.Module) -> None:  # the prompts encoded on the run's device; the tower is not kept
        init_text_head(network, tower.to(cfg.execution.device).eval(), names, prompts)
        set_info(network, text_load=f"{said}; {len(names)} class names x {len(prompts)} templates"
                 + (f" (class folders matched by name: {matched.mapping()})" if matched.renamed else ""))
    return write
