"""The text halves of the CLIP checkpoint formats `dgmoe.models.checkpoint_formats` reads image towers from,
declared the same way (a `CheckpointFormat`: markers, prefix, ordered renames, dropped keys, tensor adaptations)
and loaded into `TextTransformer` by `load_text_tower` with the image loader's file reading and strict checks:

- `openai_clip`: OpenAI's and OpenCLIP's full CLIP state dicts (`token_embedding.weight`,
  `transformer.resblocks.N.attn.in_proj_weight`, `ln_final`, `text_projection` [width, embed], `logit_scale`);
  OpenAI's `input_resolution`/`context_length`/`vocab_size` entries are dropped;
- `hf_clip`: Hugging Face `CLIPModel` and `CLIPTextModelWithProjection` (`text_model.encoder.layers.N.self_attn.
  q_proj`, `text_model.final_layer_norm`, `text_projection.weight`, `CLIPModel`'s `logit_scale`).

A file without a text tower (an image-only file: `CLIPVisionModel`, timm's CLIP, an open_clip `model.visual`)
is a one-line `CheckpointError`; a text tower without `logit_scale` (`CLIPTextModelWithProjection`) keeps CLIP's
initial log(1/0.07), and the load report says so.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from dgmoe.models.checkpoint_formats import CheckpointFormat, detect_format, fold, fuse_qkv, rename_key
from dgmoe.models.clip.text_tower import TextConfig, TextTransformer
from dgmoe.models.pretrained import (
    CheckpointError,
    CheckpointMismatchError,
    LoadReport,
    check_fit,
    load_checkpoint_file,
    resolve_checkpoint,
)

log = logging.getLogger(__name__)

#: the keys of a full CLIP file that are its image tower (reported as dropped, as the image loader does the text's)
IMAGE_PREFIXES = ("visual.", "vision_model.", "visual_projection.")

OPENAI_TEXT = CheckpointFormat(
    name="openai_clip", label="OpenAI/OpenCLIP CLIP state dict", markers=("token_embedding.weight", "ln_final.weight"),
    renames=(("transformer.resblocks.", "blocks."), ("ln_final", "norm"), ("ln_", "norm"),
             ("attn.in_proj_", "attn.qkv."), ("attn.out_proj", "attn.proj"), ("mlp.c_fc", "mlp.fc1"),
             ("mlp.c_proj", "mlp.fc2")),
    dropped=("input_resolution", "context_length", "vocab_size"),
    adapt=fold("text_projection", lambda v: v.t(), "text_projection [width, embed] transposed to proj.weight",
                "proj.weight"))
HF_TEXT = CheckpointFormat(
    name="hf_clip", label="Hugging Face CLIPModel / CLIPTextModelWithProjection state dict",
    markers=("text_model.embeddings.token_embedding.weight",), prefix="text_model.",
    renames=(("embeddings.token_embedding", "token_embedding"),
             ("embeddings.position_embedding.weight", "positional_embedding"), ("encoder.layers.", "blocks."),
             ("layer_norm1", "norm1"), ("layer_norm2", "norm2"), ("self_attn.out_proj", "attn.proj"),
             ("self_attn.", "attn."), ("final_layer_norm", "norm")),
    dropped=("embeddings.position_ids",),
    outside={"text_projection.weight": "proj.weight", "logit_scale": "logit_scale"},
    adapt=fuse_qkv)
TEXT_FORMATS: tuple[CheckpointFormat, ...] = (OPENAI_TEXT, HF_TEXT)


@dataclass(frozen=True)
class LoadedTextTower:
    """A text tower read from a file, and how (`report`: its format, what was dropped, adapted, initialised)."""

    tower: TextTransformer
    report: LoadReport


class NoTextTowerError(CheckpointError):
    """A checkpoint file without a CLIP text tower (an image tower's file: timm's, a CLIPVisionModel)."""


def convert_text(state: dict[str, torch.Tensor], path: str | Path
                 ) -> tuple[CheckpointFormat, dict[str, torch.Tensor], list[str], list[str]]:
    """(format, the text tower's state dict in `TextTransformer`'s names, what was dropped, what was adapted); a
    `CheckpointError` for a file without a text tower."""
    fmt = next((f for f in TEXT_FORMATS if all(m in state for m in f.markers)), None)
    if fmt is None:
        image = detect_format(state, set())
        what = f"read as {image.label}" if image.name != "timm" else "no CLIP key names"
        raise NoTextTowerError(f"{path} has no CLIP text tower ({what}): a text head needs a full CLIP file (OpenAI/"
                              "OpenCLIP state dict, Hugging Face CLIPModel or CLIPTextModelWithProjection)")
    out: dict[str, torch.Tensor] = {}
    dropped: dict[str, int] = {}
    for key, value in state.items():
        inner = key[len(fmt.prefix):]
        if key in fmt.outside:
            out[fmt.outside[key]] = value
        elif key.startswith(IMAGE_PREFIXES) or not key.startswith(fmt.prefix) or inner in fmt.dropped:
            group = "the image tower" if key.startswith(IMAGE_PREFIXES) else key.split(".", 1)[0]
            dropped[group] = dropped.get(group, 0) + 1
        else:
            out[rename_key(inner, fmt.renames)] = value
    adapted: list[str] = []
    if fmt.adapt is not None:
        out = fmt.adapt(out, set(), adapted)
    if "positional_embedding" in out and out["positional_embedding"].ndim == 3:  # (a [1, N, D] copy)
        out["positional_embedding"] = out["positional_embedding"][0]
    return fmt, out, [f"{g} ({n} keys)" if n > 1 else g for g, n in dropped.items()], adapted


def text_state(path: str | Path, raw: dict[str, Any] | None = None
               ) -> tuple[CheckpointFormat, dict[str, torch.Tensor], list[str], list[str]]:
    """The text tower of the checkpoint file `path`, converted (`convert_text`): read from disk, or `raw`, the
    file's state dict as `load_checkpoint_file` read it (a build reading one full CLIP file for both towers)."""
    path = resolve_checkpoint(path)
    return convert_text(load_checkpoint_file(path) if raw is None else raw, path)


def fitted_config(base: TextConfig, state: dict[str, torch.Tensor]) -> TextConfig:
    """`base` with the width, depth, embedding, context and vocabulary of the file's text tower (its shapes); the
    heads keep `base`'s head width (64 in CLIP's B and L towers, as open_clip's `heads = width // 64`)."""
    try:
        vocab, width = state["token_embedding.weight"].shape
        embed = state["proj.weight"].shape[0]
        context = state["positional_embedding"].shape[0]
    except KeyError as e:
        raise CheckpointMismatchError(f"the text tower has no {e.args[0]!r}") from None
    layers = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    head_width = base.width // base.heads
    if width % head_width:
        raise CheckpointMismatchError(f"the text tower is {width} wide, not a multiple of the {head_width}-wide heads "
                                      f"of {base}")
    return replace(base, width=width, layers=layers, heads=width // head_width, embed_dim=embed,
                   context_length=context, vocab_size=vocab)


def load_text_tower(base: TextConfig, path: str | Path, raw: dict[str, Any] | None = None) -> LoadedTextTower:
    """A `TextTransformer` with the text tower of the file `path`: `base`'s family (activation, head width) at the
    file's sizes (`fitted_config`), loaded strictly as the image loader (every key, every shape) except
    `logit_scale`, which a text-only file may lack; returned with its load report. `raw`: the file's state dict
    already read (`text_state`)."""
    fmt, state, dropped, adapted = text_state(path, raw)
    try:
        config = fitted_config(base, state)
    except CheckpointMismatchError as e:
        raise CheckpointMismatchError(f"{path}: {e} (read as {fmt.label})") from None
    tower = TextTransformer(config)
    report = LoadReport(str(path), format=fmt.name, dropped=dropped, converted=adapted)
    if config != base:
        report.converted.append(f"text tower of the file's size: width {config.width}, {config.layers} layers, "
                                f"{config.heads} heads, embedding {config.embed_dim}, {config.context_length} "
                                f"tokens, {config.vocab_size} ids")
    if "logit_scale" not in state:
        report.initialised.append("logit_scale (not in the file: CLIP's initial log(1/0.07))")
    try:
        check_fit(path, tower.state_dict(), state, tolerated={"logit_scale"})
    except CheckpointMismatchError as e:
        raise CheckpointMismatchError(f"{e} (the text tower, read as {fmt.label})") from None
    tower.load_state_dict({**tower.state_dict(), **state}, strict=True)
    log.info("text tower: %s", report.summary())
    return LoadedTextTower(tower, report)
