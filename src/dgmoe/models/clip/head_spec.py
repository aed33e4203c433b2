"""CLIP's zero-shot head as plain data, and what writes it while the model is built.

A `TextHeadSpec` says which text tower encodes the prompts (a file, or the stand-in towers' seeded random one),
the class names in label order, the prompt templates and where the prompts are encoded. `create_model(...,
text_head=spec)` builds the `TextHead` and writes it with `write_text_head`, recording how in the model's
`info.text_load`, as `pretrained=` records its `load_report`. A spec without a tower (`shape_only`) builds the
head's shape only: its weights follow (a run's weights file, `init_text_head`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from dgmoe.errors import UsageError
from dgmoe.models.clip.templates import templates
from dgmoe.models.clip.text_formats import NoTextTowerError, load_text_tower
from dgmoe.models.clip.text_tower import STAND_INS, TextTransformer, text_config
from dgmoe.models.clip.zero_shot import init_text_head
from dgmoe.models.info import model_info, set_info
from dgmoe.seeding import seed_hash

#: what `info.text_load` says of the stand-in towers' text tower
SEEDED = "the stand-in's seeded random text tower (no weights exist)"


@dataclass(frozen=True)
class TextHeadSpec:
    """A zero-shot head: `weights`, the file holding CLIP's text tower (None: the stand-in towers' text tower drawn
    from `seed`; neither: the head's shape only, its weights follow); `class_names`, the prompts' name of each
    label in label order; `templates`, a template set's name or a file (`dgmoe.models.clip.templates`);
    `renamed`, the class folders matched to a declared name only by case and `_`/`-`/space (folder, name);
    `device`, where the prompts are encoded."""

    weights: str | None = None
    seed: int | None = None
    class_names: tuple[str, ...] = ()
    templates: str = "openai_imagenet"
    renamed: tuple[tuple[str, str], ...] = ()
    device: str = "cpu"

    @property
    def writes(self) -> bool:
        """Whether the build writes the head (a text tower is named), or only gives its shape."""
        return self.weights is not None or self.seed is not None

    def shape_only(self) -> "TextHeadSpec":
        """The same head without its text tower: a rebuilt run's, whose own weights follow."""
        return dataclasses.replace(self, weights=None, seed=None)

    def mapping(self) -> str:
        """'Dog -> dog, people_ -> people': the class folders matched by name."""
        return ", ".join(f"{folder} -> {name}" for folder, name in self.renamed)


def write_text_head(model: nn.Module, spec: TextHeadSpec, name: str,
                    raw: dict[str, Any] | None = None) -> TextTransformer:
    """Write CLIP's zero-shot classifier into `model`'s `TextHead` from the text tower `spec` names (the one that
    goes with the image tower, `text_config`), record how in `info.text_load` and return the tower (in the mode
    it was built in, on `spec.device`). `raw`: the tower's file already read (one read for both towers). The
    global random state is left as it was: a text tower's construction draws nothing the run would."""
    tower_of = model_info(model).tower
    base = text_config(tower_of, name)
    with torch.random.fork_rng(devices=[]):
        if spec.weights is not None:
            try:
                loaded = load_text_tower(base, spec.weights, raw)
            except NoTextTowerError as e:  # an image tower's file (timm's): say where the full CLIP file comes from
                from dgmoe.names import weights_help

                raise NoTextTowerError(f"{e}. {weights_help(name)}") from None
            tower, said = loaded.tower, loaded.report.summary()
        elif spec.seed is not None and tower_of is not None and tower_of[0] in STAND_INS:
            torch.manual_seed(seed_hash(spec.seed, "text tower"))
            tower, said = TextTransformer(base), SEEDED
        else:
            raise UsageError(f"a text head for {name} needs CLIP's text tower from a file (only the stand-in towers "
                             "start from a seeded random one)")
    prompts = templates(spec.templates)
    training = tower.training
    init_text_head(model, tower.to(spec.device).eval(), spec.class_names, prompts)
    tower.train(training)
    set_info(model, text_load=f"{said}; {len(spec.class_names)} class names x {len(prompts)} templates"
             + (f" (class folders matched by name: {spec.mapping()})" if spec.renamed else ""))
    return tower
