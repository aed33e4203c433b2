"""The FFN activation a checkpoint states, checked against the tower it loads into (`pretrained=`).

CLIP comes in two flavours with the same keys and shapes: OpenAI's weights were trained with QuickGELU
(x * sigmoid(1.702 x), Radford et al., ICML 2021; dgmoe's `*_clip_quickgelu_*` towers), OpenCLIP's with GELU
(`*_clip_*`). Loaded into the other flavour, the features are quietly off (by 4.6e-2 on random weights), so
what the file or its folder states is read and a mismatch is refused in one line naming the tower to use
(`allow_activation_mismatch=True` loads it anyway, with a warning). The sources, first found wins:

- a Hugging Face folder's `config.json`: `hidden_act` (`vision_config.hidden_act` for a whole `CLIPModel`);
- an open_clip hub folder's `open_clip_config.json`: `model_cfg.quick_gelu` (absent: open_clip's default, GELU);
- the state dict of OpenAI's own release (`torch.jit.load(...).state_dict()`) holds `input_resolution`,
  `context_length` and `vocab_size`, which open_clip drops when it loads one (`open_clip.factory`): QuickGELU.

Where nothing is stated, the load report says the tower's own activation was assumed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

#: Hugging Face `hidden_act` values that are dgmoe activations (others, e.g. 'gelu_pytorch_tanh', are no tower's)
HF_ACTIVATIONS = {"gelu": "gelu", "quick_gelu": "quick_gelu"}
#: keys only OpenAI's own CLIP releases hold (their TorchScript model's state dict)
OPENAI_MARKERS = ("input_resolution", "context_length", "vocab_size")
#: each activation's tower-name infix, to name the tower to use
FLAVOUR_NAMES = {"quick_gelu": "_clip_quickgelu_", "gelu": "_clip_"}


@dataclass(frozen=True)
class Stated:
    """An activation a checkpoint states, and where (`source`, as said in the messages)."""

    activation: str
    source: str


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stated_activation(path: str | Path, keys: Mapping[str, Any] | set[str]) -> Stated | None:
    """The activation the checkpoint `path` (whose state dict has `keys`) or its folder states, or None."""
    folder = Path(path).parent
    config = _json(folder / "config.json")
    vision = config.get("vision_config")
    for where, holder in (("config.json vision_config.hidden_act", vision if isinstance(vision, dict) else {}),
                          ("config.json hidden_act", config)):
        act = holder.get("hidden_act")
        if isinstance(act, str):
            return Stated(HF_ACTIVATIONS.get(act, act), where)
    model_cfg = _json(folder / "open_clip_config.json").get("model_cfg")
    if isinstance(model_cfg, dict):
        quick = bool(model_cfg.get("quick_gelu", False))
        source = "open_clip_config.json quick_gelu" + ("" if "quick_gelu" in model_cfg else " (absent: GELU)")
        return Stated("quick_gelu" if quick else "gelu", source)
    found = [k for k in OPENAI_MARKERS if k in keys]
    if found:
        return Stated("quick_gelu", f"the state dict's {found[0]!r} key (OpenAI's CLIP release)")
    return None


def tower_for(name: str, activation: str) -> str | None:
    """The registered tower like `name` with `activation` (the CLIP flavour twin), or None."""
    from dgmoe.models.registry import MODELS

    own = next((infix for infix in FLAVOUR_NAMES.values() if infix in name), None)
    if own is None or activation not in FLAVOUR_NAMES:
        return None
    twin = name.replace(own, FLAVOUR_NAMES[activation], 1)
    return twin if twin != name and twin in MODELS else None


def check_activation(path: str | Path, keys: Mapping[str, Any] | set[str], name: str, own: str
                     ) -> tuple[str, str | None]:
    """(what the load report says about the activation (if the load goes on), the one-line mismatch or None).
    `name`, `own`: the tower's registered name and activation."""
    stated = stated_activation(path, keys)
    if stated is None:
        return f"{own} (assumed: the tower's own; the file states none)", None
    if stated.activation == own:
        return f"{own} (stated by {stated.source})", None
    twin = tower_for(name, stated.activation)
    use = f"use {twin}" if twin else f"no dgmoe tower uses {stated.activation!r}"
    problem = f"{path}: {stated.source} says {stated.activation!r}, but {name} uses {own!r}: {use}"
    return f"{own}, not the {stated.activation!r} {stated.source} says (mismatch allowed)", problem
