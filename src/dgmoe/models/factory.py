"""`create_model`: timm's factory for dgmoe's registered models, with timm users' habits answered.

What timm does that dgmoe does too: `None` arguments mean the model's default, `checkpoint_path=FILE` loads
the model's own weights after construction, `features_only=True` (+ `out_indices`) returns a feature
extractor (`dgmoe.models.features`). What dgmoe does not do, in one line each: download weights
(`pretrained=True`, `pretrained='hf-hub:...'` without the optional 'hub' extra, a hub name or a
`name.tag` as the model name).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch.nn as nn

from dgmoe import names
from dgmoe.errors import UsageError
from dgmoe.models.registry import MODELS

if TYPE_CHECKING:
    from dgmoe.models.clip.head_spec import TextHeadSpec

HUB_PREFIXES = names.HUB_PREFIXES
log = logging.getLogger(__name__)


def check_model_name(name: str) -> None:
    """A one-line error for a timm model name that picks downloadable weights (`dgmoe.names.check_model_name`
    over the live registry): a hub name ('hf-hub:timm/...', 'timm/...') or a pretrained tag ('resnet50.a1_in1k')."""
    names.check_model_name(name, MODELS)


@dataclass(frozen=True)
class BuiltModel:
    """What `build_model` built: the network, and the CLIP text tower that wrote its zero-shot head (None: no
    head was written), for an algorithm that trains that tower too (FLYP)."""

    model: nn.Module
    text_tower: nn.Module | None = None


def create_model(name: str, num_classes: int | None = None, img_size: int | None = None,
                 pretrained: str | Path | None = None, pretrained_antialias: bool = True,
                 allow_activation_mismatch: bool = False,
                 checkpoint_path: str | Path | None = None, features_only: bool = False,
                 out_indices: int | Sequence[int] | None = None, peft: Any = None,
                 text_head: "TextHeadSpec | bool | None" = None, **overrides: Any) -> nn.Module:
    """Build a registered model; `None` values mean "the model's default" (as timm's factory).

    `pretrained` is a local checkpoint path (timm/DeiT names, `.safetensors` or `.pth`) adapted to the
    model: dense FFN weights are copied into every expert of the MoE blocks, a head with another class count
    is re-initialised, position/patch embeddings are resampled to the model's grid and patch size
    (`pretrained_antialias`: as timm >= 0.9, or False as timm 0.5-0.6), and the load report is logged. A
    file whose folder or keys state another FFN activation than the tower's (OpenAI's QuickGELU CLIP into a
    GELU tower, or the reverse) is refused naming the tower to use; `allow_activation_mismatch` loads it with a
    warning (`dgmoe.models.flavour`).

    `checkpoint_path` is timm's: a file holding this very model's state dict (a fine-tuned checkpoint with
    the same head, a dgmoe run's `best.safetensors`), loaded as-is after construction and strictly (EMA
    weights first, as timm); nothing is adapted, so any difference is an error naming the first key. It
    replaces `pretrained` (both at once is an error). With `features_only`, it is the full model's
    state dict, loaded before the head is dropped (timm loads it into the feature wrapper instead).

    `peft` (a `dgmoe.peft.config.PeftConfig`, its dict or a mode name) makes it a parameter-efficient model
    after the pretrained weights are loaded: its modules added, every other weight frozen, and the model's
    `info` carries `peft` and `base_weights` (the base weights a PEFT checkpoint needs: name, file and sha256).
    The model's `info` (`dgmoe.models.info.ModelInfo`) also carries the `load_report` of its checkpoint.

    `text_head` (a `dgmoe.models.clip.head_spec.TextHeadSpec`) replaces the linear classifier by a
    `dgmoe.models.clip.zero_shot.TextHead` of the same shape, a linear layer on the normalised feature, and writes
    CLIP's zero-shot classifier into it from the text tower the spec names (after the pretrained weights and
    `peft`), recording how in the model's `info.text_load`; a full CLIP file given as both `pretrained` and the
    spec's tower is read once. A spec without a tower (`shape_only()`), or `text_head=True`, builds the head's
    shape only (its weights follow: a run's weights file, `init_text_head`).

    `features_only=True` returns a feature extractor whose forward gives a list of `[B, C, H, W]` maps and
    whose `feature_info` describes them, as timm (`dgmoe.models.features`); `out_indices` picks the levels.
    """
    return build_model(name, num_classes=num_classes, img_size=img_size, pretrained=pretrained,
                       pretrained_antialias=pretrained_antialias, allow_activation_mismatch=allow_activation_mismatch,
                       checkpoint_path=checkpoint_path, features_only=features_only, out_indices=out_indices,
                       peft=peft, text_head=text_head, **overrides).model


def build_model(name: str, num_classes: int | None = None, img_size: int | None = None,
                pretrained: str | Path | None = None, pretrained_antialias: bool = True,
                allow_activation_mismatch: bool = False,
                checkpoint_path: str | Path | None = None, features_only: bool = False,
                out_indices: int | Sequence[int] | None = None, peft: Any = None,
                text_head: "TextHeadSpec | bool | None" = None, **overrides: Any) -> BuiltModel:
    """`create_model`, with the text tower that wrote the model's zero-shot head beside it (`BuiltModel`)."""
    from dgmoe.models.features import features_model
    from dgmoe.models.info import given, set_info
    from dgmoe.models.peft import apply_peft, base_weights
    from dgmoe.models.pretrained import (
        CheckpointError,
        CheckpointMismatchError,
        load_checkpoint,
        load_checkpoint_file,
        load_pretrained,
        missing_checkpoint,
        resolve_checkpoint,
    )
    from dgmoe.peft.config import as_peft

    check_model_name(name)
    if pretrained is True or pretrained == "True":
        raise missing_checkpoint(pretrained, name)
    if checkpoint_path is not None and not isinstance(checkpoint_path, (str, Path)):
        raise CheckpointError(f"checkpoint_path must be a path to a local weights file, got {checkpoint_path!r}")
    if pretrained and checkpoint_path:
        raise CheckpointError("pass pretrained= or checkpoint_path=, not both: checkpoint_path loads every weight "
                              "as-is, so the pretrained ones would be overwritten")
    if out_indices is not None and not features_only:
        raise UsageError(f"out_indices={out_indices!r} needs features_only=True (it picks the feature levels "
                               "a feature extractor returns)")
    if pretrained and not str(pretrained).startswith(HUB_PREFIXES) and not Path(pretrained).is_file():
        raise missing_checkpoint(pretrained, name)  # (with how to get this model's weights)
    kwargs = given(dict(overrides, num_classes=num_classes, img_size=img_size))
    model = MODELS.get(name)(**kwargs)
    if text_head:  # before the load, whose report then says the head is the text tower's, not initialised
        from dgmoe.models.clip.zero_shot import use_text_head

        use_text_head(model)
    spec = text_head if text_head is not None and not isinstance(text_head, bool) and text_head.writes else None
    raw = None  # a full CLIP file, both towers' source: read once
    if pretrained and spec is not None and spec.weights is not None and _same_file(spec.weights, pretrained):
        raw = load_checkpoint_file(resolve_checkpoint(pretrained, name))
    if pretrained:
        report = load_pretrained(model, pretrained, antialias=pretrained_antialias,
                                 allow_activation_mismatch=allow_activation_mismatch, name=name, raw=raw)
        set_info(model, load_report=report)
        _warn_regrid(name, img_size, report)
    config = as_peft(peft)
    if config is not None:
        apply_peft(model, config)
        set_info(model, base_weights=base_weights(name, pretrained if config.active else None))
    tower = None
    if spec is not None:
        from dgmoe.models.clip.head_spec import write_text_head

        tower = write_text_head(model, spec, name, raw)
        del raw
    if checkpoint_path:
        try:
            set_info(model, load_report=load_checkpoint(model, checkpoint_path))
        except (CheckpointError, CheckpointMismatchError) as e:  # the same errors as pretrained=, argument named
            raise type(e)(f"checkpoint_path: {e}") from None
    if features_only:
        model = features_model(model, out_indices, name)
    return BuiltModel(model, tower)


def _same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two checkpoint sources name one file (a Hub name: the same name)."""
    a, b = str(a), str(b)
    if a.startswith(HUB_PREFIXES) or b.startswith(HUB_PREFIXES):
        return a == b
    return Path(a).resolve() == Path(b).resolve()


def _warn_regrid(name: str, img_size: int | None, report: Any) -> None:
    """A warning when the checkpoint's position embedding was resampled because the model is built at another
    size than its registered one (a 28 px stand-in at 224 px): the user should mean that size. At its registered
    size a resample is the model's design (DINOv2's 518 px checkpoints at 224 px) and the load report says it."""
    if not report.regridded or img_size is None:
        return
    from dgmoe.models.info import describe_model

    registered = describe_model(name).input_size[-1]
    if registered == img_size:
        return
    old, new, patch = report.regridded
    size = f"{old * patch}" if patch else f"{registered}"
    log.warning(f"{report.path}: position embedding resampled from the checkpoint's {old}x{old} grid to the "
                f"model's {new}x{new} ({name} is registered at {registered} px, built at {img_size} px): the tower "
                f"was trained on {'other' if not patch else size + ' px'} images and now sees {img_size} px ones; "
                f"pass img_size={size} (--img-size {size}) unless that is meant")
