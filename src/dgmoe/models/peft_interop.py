"""LoRA that travels: folded into the base weights (`merge_lora`), and in peft's adapter format both ways.

- `merge_lora`: W = W0 + (alpha / r) B A for each LoRA projection (Hu et al. 2021, eq. 3 and §4.2: merged, LoRA
  adds no inference latency), each `LoRALinear` replaced by a plain `nn.Linear` of timm's name.
- `peft_adapter` / `export_peft_adapter`: a LoRA model's weights as peft's `adapter_model.safetensors` (keys
  `base_model.model.<module>.lora_A.weight` / `lora_B.weight`; the classifier, which dgmoe trains beside LoRA, as
  peft's `modules_to_save`: `base_model.model.head.weight`) and its `adapter_config.json` (peft_type LORA, r,
  lora_alpha, lora_dropout, target_modules: the projections' names, or their full module names when only
  some blocks have LoRA). peft's `PeftModel.from_pretrained(model, folder)` loads it onto the same timm-named
  model and computes what dgmoe's LoRA computes.
- `import_peft_adapter`: a peft LoRA adapter trained on a timm-named ViT, or on open_clip's image tower
  (`transformer.resblocks.N.mlp.c_fc` / `c_proj`, renamed as the `openai_clip` checkpoint format renames), added
  to a dgmoe model built without `--peft` (its base weights already loaded): the same `LoRALinear` modules as
  `--peft lora`, holding the adapter's weights. peft's rsLoRA (scaling alpha / sqrt(r)) is the same update with
  dgmoe's alpha = lora_alpha sqrt(r). What dgmoe's LoRA cannot hold (DoRA, per-module ranks, trained biases,
  LoRA outside the blocks' projections) is refused in one line naming it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from dgmoe.errors import UsageError
from dgmoe.models.checkpoint_formats import OPENAI_CLIP
from dgmoe.models.info import set_info
from dgmoe.models.peft import LoRALinear, apply_peft, peft_of
from dgmoe.peft.config import LORA_TARGETS, PeftConfig, targets_setting

PEFT_PREFIX = "base_model.model."
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
#: peft LoraConfig fields dgmoe's LoRA cannot hold: (field, the value dgmoe holds, what it would mean)
UNSUPPORTED: tuple[tuple[str, Any, str], ...] = (
    ("use_dora", False, "DoRA's magnitude vectors"), ("fan_in_fan_out", False, "Conv1D-layout weights"),
    ("bias", "none", "trained biases"), ("lora_bias", False, "a bias on lora_B"),
    ("rank_pattern", {}, "per-module ranks"), ("alpha_pattern", {}, "per-module alphas"))


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """The model's LoRA projections by module name (`blocks.N.attn.qkv`...)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, module)


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA update into its base weight, W0 + (alpha / r) B A, replacing each `LoRALinear` by a plain
    `nn.Linear` (frozen as the base was); in place, returns `model`, which then carries no PEFT config."""
    for name, layer in lora_layers(model).items():
        weight = layer.weight
        linear = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None, device=weight.device,
                           dtype=weight.dtype)
        delta = (layer.lora_B.double() @ layer.lora_A.double()) * layer.scaling
        linear.weight.copy_((weight.double() + delta).to(weight.dtype))
        if layer.bias is not None:
            linear.bias.copy_(layer.bias)
        linear.requires_grad_(False)
        _set_module(model, name, linear)
    if peft_of(model) is not None:
        set_info(model, peft=None)
    return model


def _classifier(model: nn.Module) -> str:
    return getattr(getattr(model, "info", None), "classifier", "head")


def peft_adapter(model: nn.Module, base_model: str | None = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(peft's adapter_config.json, its adapter_model.safetensors tensors) of a `--peft lora` model."""
    config = peft_of(model)
    layers = lora_layers(model)
    if config is None or config.mode != "lora" or not layers:
        mode = "no PEFT" if config is None else f"--peft {config.mode}"
        raise UsageError(f"peft's adapter format holds LoRA weights (--peft lora); this model has {mode}")
    tensors: dict[str, torch.Tensor] = {}
    for name, layer in layers.items():
        tensors[f"{PEFT_PREFIX}{name}.lora_A.weight"] = layer.lora_A.detach()
        tensors[f"{PEFT_PREFIX}{name}.lora_B.weight"] = layer.lora_B.detach()
    classifier = _classifier(model)
    head = {k: v for k, v in model.state_dict().items() if k.startswith(classifier + ".")}
    tensors.update({PEFT_PREFIX + k: v.detach() for k, v in head.items()})
    blocks = {name.split(".")[1] for name in layers}
    every = len(blocks) == len(getattr(model, "blocks", ()))
    targets = sorted({name.rsplit(".", 1)[1] for name in layers}) if every else sorted(layers)
    adapter: dict[str, Any] = {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": base_model, "r": config.rank,
        "lora_alpha": config.alpha, "lora_dropout": config.dropout, "target_modules": targets,
        "modules_to_save": [classifier] if head else None, "bias": "none", "fan_in_fan_out": False,
        "init_lora_weights": True, "use_rslora": False, "use_dora": False, "inference_mode": True,
        "rank_pattern": {}, "alpha_pattern": {}, "layers_to_transform": None, "layers_pattern": None}
    return adapter, {k: v.contiguous().cpu() for k, v in tensors.items()}


def read_peft_adapter(folder: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A peft adapter folder's config and tensors, or a one-line error naming the folder."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config_path, weights_path = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    for path in (config_path, weights_path):
        if not path.is_file():
            raise UsageError(f"{folder} is not a peft adapter folder ({path.name} missing)")
    try:
        config = json.loads(config_path.read_text())
        tensors = load_file(str(weights_path))
    except Exception as e:  # corrupt JSON or safetensors
        raise UsageError(f"cannot read the peft adapter in {folder}: {type(e).__name__}: {e}") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        kind = config.get("peft_type") if isinstance(config, dict) else None
        raise UsageError(f"{config_path}: peft_type must be LORA, got {kind!r} (dgmoe imports LoRA adapters only)")
    for key, holds, what in UNSUPPORTED:
        if config.get(key, holds) not in (holds, None):
            raise UsageError(f"{config_path}: {key}={config[key]!r} ({what}) has no place in dgmoe's LoRA")
    return config, tensors


def _dgmoe_name(module: str) -> str:
    """A peft module path in timm's names: open_clip's image tower (`visual.` stripped) renamed as the
    `openai_clip` checkpoint format renames its keys."""
    module = module.removeprefix("visual.")
    for old, new in OPENAI_CLIP.renames:
        module = module.replace(old, new)
    return module


def _lora_modules(tensors: dict[str, torch.Tensor], folder: Path
                  ) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """({module: {'lora_A': A, 'lora_B': B}} in timm's names, {other key: tensor}) of an adapter's tensors."""
    keys = {k.removeprefix(PEFT_PREFIX): v for k, v in tensors.items()}
    if any(k.startswith("visual.") for k in keys):  # peft on a whole open_clip CLIP: its image tower's keys only
        keys = {k: v for k, v in keys.items() if k.startswith("visual.")}
    modules: dict[str, dict[str, torch.Tensor]] = {}
    others: dict[str, torch.Tensor] = {}
    for key, value in keys.items():
        stem, _, kind = key.partition(".lora_")
        if not kind:
            others[key] = value
            continue
        if "attn.out_proj" in stem or stem.endswith(".attn"):
            raise UsageError(f"{folder}: LoRA on {stem} (torch's nn.MultiheadAttention, open_clip's attention) is "
                             "not imported: its forward reads out_proj's weight without calling it")
        modules.setdefault(_dgmoe_name(stem), {})[f"lora_{kind.split('.')[0]}"] = value
    return modules, others


def import_peft_adapter(model: nn.Module, folder: str | Path) -> PeftConfig:
    """Add the peft LoRA adapter in `folder` to `model` (built without --peft, base weights loaded): LoRA on
    the projections it names, holding its weights, and its saved classifier; returns the `PeftConfig`."""
    folder = Path(folder)
    config, tensors = read_peft_adapter(folder)
    existing = peft_of(model)
    if existing is not None and existing.active:
        raise UsageError(f"import the peft adapter {folder} into a model built without --peft (this one has "
                         f"--peft {existing.mode})")
    modules, others = _lora_modules(tensors, folder)
    parsed = [(name, name.split(".")) for name in modules]
    bad = [name for name, parts in parsed if len(parts) != 4 or parts[0] != "blocks" or not parts[1].isdigit()
           or parts[3] not in LORA_TARGETS or set(modules[name]) != {"lora_A", "lora_B"}]
    if bad or not modules:
        where = f"{bad[0]} is not" if bad else "no module has"
        raise UsageError(f"{folder}: {where} a LoRA pair on a block's projection (blocks.N.attn.qkv/proj, "
                         f"blocks.N.mlp.fc1/fc2), which is what dgmoe's LoRA adapts")
    targets = tuple(t for t in LORA_TARGETS if any(parts[3] == t for _, parts in parsed))
    blocks = sorted({int(parts[1]) for _, parts in parsed})
    if len(modules) != len(targets) * len(blocks):
        raise UsageError(f"{folder}: LoRA on {len(modules)} projections is not the same targets "
                         f"({', '.join(targets)}) in each of blocks {blocks}, which dgmoe's --peft lora adapts")
    rank = int(config.get("r", 8))
    alpha = float(config.get("lora_alpha", 8)) * (math.sqrt(rank) if config.get("use_rslora") else 1.0)
    depth = len(getattr(model, "blocks", ()))
    peft = PeftConfig(mode="lora", rank=rank, alpha=alpha, dropout=float(config.get("lora_dropout") or 0.0),
                      targets=targets_setting(targets), blocks=() if blocks == list(range(depth)) else tuple(blocks))
    apply_peft(model, peft)
    layers = lora_layers(model)
    state = {f"{name}.{kind}": value for name, pair in modules.items() for kind, value in pair.items()}
    classifier = _classifier(model)
    state.update({_dgmoe_name(k): v for k, v in others.items()})
    own = model.state_dict()
    for key, value in state.items():
        if key not in own:
            raise UsageError(f"{folder}: {key} is not in {type(model).__name__} (an adapter of another "
                             "architecture?)")
        if own[key].shape != value.shape:
            what = "classifier" if key.startswith(classifier + ".") else "LoRA weight"
            raise UsageError(f"{folder}: {what} {key} is {tuple(value.shape)}, the model's {tuple(own[key].shape)}")
    if set(layers) != set(modules):
        raise UsageError(f"{folder}: the model's LoRA modules are not the adapter's")
    model.load_state_dict(state, strict=False)
    return peft
