"""The checkpoint formats `pretrained=FILE` reads, each a small declared key map, detected from the keys.

A format turns a file's state dict into timm's names (dgmoe's): it keeps the keys under its `prefix` (the
rest is another tower, e.g. CLIP's text tower, and is dropped), renames them by its ordered substring swaps
(timm's `_convert_openai_clip` table style), drops `dropped` keys, and applies its tensor adaptations
(a fused q/k/v, a transposed projection, a reshaped class token...). Every drop and adaptation is said in
the `LoadReport`. Formats, first match wins:

- `openai_clip`: OpenAI's and OpenCLIP's CLIP state dicts (`visual.class_embedding`, `visual.conv1`,
  `visual.transformer.resblocks.N.attn.in_proj_weight`, `visual.proj` [width, embed]);
- `hf_clip`: Hugging Face `CLIPVisionModel` / `CLIPVisionModelWithProjection` / `CLIPModel`
  (`vision_model.encoder.layers.N.self_attn.q_proj`, `visual_projection`); transformers 5's `CLIPVisionModel`
  writes the same keys without the `vision_model.` prefix (`embeddings.class_embedding`, `pre_layrnorm`), a
  declared variant of the format;
- `hf_dinov2`: Hugging Face `Dinov2Model` / `Dinov2WithRegistersModel` (`embeddings.cls_token`,
  `encoder.layer.N.attention.attention.query`, `layer_scale1.lambda1`), resampled as transformers' own
  forward (`HF_DINOV2_OWN`, `HF_DINOV2_REG_OWN`);
- `dinov2_hub`: the DINOv2 torch.hub `.pth` files (`mask_token`, `register_tokens`, `blocks.N.ls1.gamma`,
  `pos_embed` over the class token and the 518 px grid), converted as timm's `_convert_dinov2`;
- `timm_clip`: timm's converted CLIP towers, whose `head` is CLIP's projection (`head.bias` zeros);
- `timm`: timm's (and dgmoe's) own names, as they are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from dgmoe.models.resample import PosResample

Adapt = Callable[[dict[str, torch.Tensor], set[str], list[str]], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class CheckpointFormat:
    """A checkpoint format: its name, the keys that identify it (all must be present, after the prefix
    where they start with it), the prefix of the image tower's keys, the renames (ordered substring swaps),
    dropped keys and a tensor adaptation `adapt(state, model_keys, adapted) -> state`."""

    name: str
    label: str
    markers: tuple[str, ...]
    prefix: str = ""
    renames: tuple[tuple[str, str], ...] = ()
    dropped: tuple[str, ...] = ()
    adapt: Adapt | None = None
    needs_model_key: str | None = None  # detected only for a model that has this key and a file without it
    outside: dict[str, str] = field(default_factory=dict)  # keys outside the prefix that are the tower's
    #: how the format's own code resamples its position embedding, given the converted state dict (None:
    #: the loader's choice, timm's by default)
    pos_resample: Callable[[dict[str, torch.Tensor]], PosResample | None] | None = None


def fold(key: str, fn: Callable[[torch.Tensor], torch.Tensor], note: str, new_key: str | None = None) -> Adapt:
    """`state[key]` -> `state[new_key or key] = fn(state[key])`."""
    def adapt(state: dict[str, torch.Tensor], own: set[str], adapted: list[str]) -> dict[str, torch.Tensor]:
        if key in state:
            state[new_key or key] = fn(state.pop(key))
            adapted.append(note)
        return state
    return adapt


def _chain(*steps: Adapt) -> Adapt:
    def adapt(state: dict[str, torch.Tensor], own: set[str], adapted: list[str]) -> dict[str, torch.Tensor]:
        for step in steps:
            state = step(state, own, adapted)
        return state
    return adapt


def fuse_qkv(state: dict[str, torch.Tensor], own: set[str], adapted: list[str]) -> dict[str, torch.Tensor]:
    """Hugging Face's separate q/k/v projections -> timm's fused `attn.qkv` ([q; k; v] rows, as
    `nn.MultiheadAttention.in_proj_weight`)."""
    fused = 0
    for key in [k for k in state if ".attn.q_proj." in k]:
        stem, _, kind = key.rpartition(".attn.q_proj.")
        parts = [state.pop(f"{stem}.attn.{p}_proj.{kind}") for p in "qkv"]
        state[f"{stem}.attn.qkv.{kind}"] = torch.cat(parts, dim=0)
        fused += 1
    if fused:
        adapted.append(f"fused q/k/v projections into attn.qkv ({fused} tensors)")
    return state


def _drop_zero_head_bias(state: dict[str, torch.Tensor], own: set[str], adapted: list[str]) -> dict[str, torch.Tensor]:
    bias = state.get("head.bias")
    if "head.weight" in state and "proj.weight" not in state:
        state["proj.weight"] = state.pop("head.weight")
        adapted.append("head.weight is CLIP's projection: proj.weight")
        if bias is not None and not bool(bias.any()):
            state.pop("head.bias")
            adapted.append("dropped head.bias (zeros: timm's bias of CLIP's bias-free projection)")
    return state


def _dinov2_tokens(state: dict[str, torch.Tensor], own: set[str], adapted: list[str]) -> dict[str, torch.Tensor]:
    """timm's `_convert_dinov2`: with registers, the class token takes pos_embed[:, 0] and the position
    embedding keeps the patches only (no_embed_class); DINOv2 adds both before inserting the registers."""
    if "register_tokens" in state and "pos_embed" in state:
        state["reg_token"] = state.pop("register_tokens")
        pos = state.pop("pos_embed")
        state["cls_token"] = state.pop("cls_token") + pos[:, 0]
        state["pos_embed"] = pos[:, 1:]
        adapted.append("register_tokens -> reg_token; cls_token + pos_embed[:, 0] -> cls_token; pos_embed over "
                       "the patches only")
    return state


OPENAI_CLIP = CheckpointFormat(
    name="openai_clip", label="OpenAI/OpenCLIP CLIP state dict",
    markers=("visual.class_embedding", "visual.conv1.weight"), prefix="visual.",
    renames=(("conv1", "patch_embed.proj"), ("positional_embedding", "pos_embed"), ("class_embedding", "cls_token"),
             ("transformer.resblocks.", "blocks."), ("ln_pre", "norm_pre"), ("ln_post", "norm"), ("ln_", "norm"),
             ("attn.in_proj_", "attn.qkv."), ("attn.out_proj", "attn.proj"), ("mlp.c_fc", "mlp.fc1"),
             ("mlp.c_proj", "mlp.fc2")),
    adapt=_chain(fold("proj", lambda v: v.t(), "visual.proj [width, embed] transposed to proj.weight", "proj.weight"),
                 fold("cls_token", lambda v: v.reshape(1, 1, -1), "class_embedding reshaped to cls_token [1, 1, D]"),
                 fold("pos_embed", lambda v: v.unsqueeze(0), "positional_embedding reshaped to pos_embed [1, N, D]")),
)
OPENAI_CLIP_BARE = CheckpointFormat(  # an open_clip `model.visual.state_dict()`, without the prefix
    name="openai_clip", label="OpenAI/OpenCLIP CLIP image tower", markers=("class_embedding", "conv1.weight"),
    renames=OPENAI_CLIP.renames, adapt=OPENAI_CLIP.adapt)
HF_CLIP = CheckpointFormat(
    name="hf_clip", label="Hugging Face CLIPVisionModel state dict",
    markers=("vision_model.embeddings.class_embedding",), prefix="vision_model.",
    renames=(("embeddings.class_embedding", "cls_token"), ("embeddings.patch_embedding", "patch_embed.proj"),
             ("embeddings.position_embedding.weight", "pos_embed"), ("pre_layrnorm", "norm_pre"),
             ("post_layernorm", "norm"), ("encoder.layers.", "blocks."), ("layer_norm1", "norm1"),
             ("layer_norm2", "norm2"), ("self_attn.out_proj", "attn.proj"), ("self_attn.", "attn.")),
    dropped=("embeddings.position_ids",),
    outside={"visual_projection.weight": "proj.weight"},
    adapt=_chain(fuse_qkv,
                 fold("cls_token", lambda v: v.reshape(1, 1, -1), "class_embedding reshaped to cls_token [1, 1, D]"),
                 fold("pos_embed", lambda v: v.unsqueeze(0), "position_embedding reshaped to pos_embed [1, N, D]")),
)
#: DINOv2's hub models without registers interpolate by the factor (new + 0.1) / old, no antialias; those with
#: registers to the output size with antialias (`dinov2/hub/backbones.py`), which is timm's resampling
DINOV2_OWN = PosResample(antialias=False, offset=0.1, label="bicubic by the factor (new grid + 0.1) / old grid, "
                                                            "no antialias (DINOv2's interpolate_pos_encoding)")
DINOV2_HUB = CheckpointFormat(
    name="dinov2_hub", label="DINOv2 hub checkpoint", markers=("mask_token",), dropped=("mask_token",),
    adapt=_dinov2_tokens, pos_resample=lambda state: None if "reg_token" in state else DINOV2_OWN)
HF_CLIP_BARE = CheckpointFormat(  # transformers 5's CLIPVisionModel.save_pretrained: no `vision_model.` prefix
    name="hf_clip", label="Hugging Face CLIPVisionModel state dict (transformers 5, no vision_model. prefix)",
    markers=("embeddings.class_embedding", "pre_layrnorm.weight"), renames=HF_CLIP.renames, dropped=HF_CLIP.dropped,
    adapt=HF_CLIP.adapt)
#: transformers' Dinov2 `interpolate_pos_encoding`: bicubic to the output size, no antialias, no 0.1 offset (unlike
#: DINOv2's own hub models); its Dinov2WithRegisters: to the size with antialias (timm's and the hub's registers')
HF_DINOV2_OWN = PosResample(antialias=False, offset=0.0, label="bicubic to the size, no antialias (transformers' "
                                                                "Dinov2 interpolate_pos_encoding)")
HF_DINOV2_REG_OWN = PosResample(antialias=True, offset=0.0, label="bicubic to the size with antialias (transformers' "
                                                                   "Dinov2WithRegisters interpolate_pos_encoding)")
HF_DINOV2 = CheckpointFormat(
    name="hf_dinov2", label="Hugging Face Dinov2Model / Dinov2WithRegistersModel state dict",
    markers=("embeddings.cls_token", "embeddings.patch_embeddings.projection.weight"),
    renames=(("embeddings.cls_token", "cls_token"), ("embeddings.register_tokens", "register_tokens"),
             ("embeddings.position_embeddings", "pos_embed"),
             ("embeddings.patch_embeddings.projection", "patch_embed.proj"),
             ("encoder.layer.", "blocks."), ("attention.output.dense", "attn.proj"),
             ("attention.attention.query", "attn.q_proj"), ("attention.attention.key", "attn.k_proj"),
             ("attention.attention.value", "attn.v_proj"), ("layer_scale1.lambda1", "ls1.gamma"),
             ("layer_scale2.lambda1", "ls2.gamma"), ("layernorm.", "norm.")),
    dropped=("embeddings.mask_token",), adapt=_chain(fuse_qkv, _dinov2_tokens),
    pos_resample=lambda state: HF_DINOV2_REG_OWN if "reg_token" in state else HF_DINOV2_OWN)
TIMM_CLIP = CheckpointFormat(
    name="timm_clip", label="timm CLIP tower", markers=("norm_pre.weight", "head.weight"), adapt=_drop_zero_head_bias,
    needs_model_key="proj.weight")
TIMM = CheckpointFormat(name="timm", label="timm/dgmoe state dict", markers=())

#: detection order: the first format whose markers are all present
FORMATS: tuple[CheckpointFormat, ...] = (OPENAI_CLIP, OPENAI_CLIP_BARE, HF_CLIP, HF_CLIP_BARE, HF_DINOV2, DINOV2_HUB,
                                         TIMM_CLIP, TIMM)


def detect_format(state: dict[str, torch.Tensor], model_keys: set[str]) -> CheckpointFormat:
    for fmt in FORMATS:
        if not all(m in state for m in fmt.markers):
            continue
        if fmt.needs_model_key and (fmt.needs_model_key not in model_keys or fmt.needs_model_key in state):
            continue
        return fmt
    return TIMM


def rename_key(key: str, renames: tuple[tuple[str, str], ...]) -> str:
    """`key` with each of a format's ordered `renames` (old, new) applied in turn."""
    for old, new in renames:
        key = key.replace(old, new)
    return key


def convert(state: dict[str, torch.Tensor], model_keys: set[str]
            ) -> tuple[CheckpointFormat, dict[str, torch.Tensor], list[str], list[str]]:
    """(format, the state dict in timm's names, what was dropped, what was adapted)."""
    fmt = detect_format(state, model_keys)
    return (fmt, *convert_as(fmt, state, model_keys))


def convert_as(fmt: CheckpointFormat, state: dict[str, torch.Tensor], model_keys: set[str]
               ) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """(the state dict read as `fmt`, in timm's names; what was dropped; what was adapted)."""
    if fmt is TIMM:
        return state, [], []
    out: dict[str, torch.Tensor] = {}
    dropped_groups: dict[str, int] = {}
    for key, value in state.items():
        if key in fmt.outside:
            out[fmt.outside[key]] = value
        elif not key.startswith(fmt.prefix) or key[len(fmt.prefix):] in fmt.dropped:
            group = key if key[len(fmt.prefix):] in fmt.dropped else key.split(".", 1)[0]
            dropped_groups[group] = dropped_groups.get(group, 0) + 1
        else:
            out[rename_key(key[len(fmt.prefix):], fmt.renames)] = value
    dropped = [f"{g} ({n} keys)" if n > 1 else g for g, n in dropped_groups.items()]
    adapted: list[str] = []
    if fmt.adapt is not None:
        out = fmt.adapt(out, model_keys, adapted)
    return out, dropped, adapted


def closest_format(state: dict[str, torch.Tensor], model_keys: set[str]) -> str:
    """For a file no format's markers match: the format that, read as it, fills the most of the model's keys,
    and what differs (the marker keys the file lacks), in words for the error."""
    scores: list[tuple[int, int, CheckpointFormat]] = []
    for fmt in FORMATS:
        try:
            keys = set(convert_as(fmt, state, model_keys)[0])
        except (RuntimeError, ValueError, KeyError, IndexError):  # a tensor of another shape than the format's
            keys = set()
        scores.append((len(keys & model_keys) - len(keys - model_keys), len(keys & model_keys), fmt))
    timm = scores[-1]  # another format must fit strictly better than timm's names as they are; of equals, the
    # one whose markers the file lacks fewest of
    best = max(scores[:-1], key=lambda s: (s[0], -sum(m not in state for m in s[2].markers)))
    _, score, fmt = best if best[0] > timm[0] else timm
    found = f"{score} of the model's {len(model_keys)} keys found"
    lacks = [m for m in fmt.markers if m not in state]
    if fmt is TIMM or not lacks:
        return f"closest format: {fmt.label}, {found}"
    return (f"closest format: {fmt.label}, {found}, but the file lacks its marker key{'s' * (len(lacks) > 1)} "
            f"{', '.join(repr(m) for m in lacks)}")
