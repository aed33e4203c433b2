"""Record timm's own numbers for tests/parity/test_timm_parity.py (needs an environment where timm imports):

    /work/parity-venv/bin/python tests/parity/record_timm.py

Writes, per topic, tests/parity/fixtures/timm_<topic>.safetensors (inputs and timm's outputs) and
timm_<topic>.json (peer, versions, this command, the cases, and what every tensor is). Inputs come from
numpy's legacy `RandomState` (a frozen stream) and are stored, so the tests never regenerate them.
Topics:
- resample: `timm.layers.resample_abs_pos_embed` and `resample_patch_embed`, antialiased and plain;
- vit: a tiny `VisionTransformer`'s forward, and `checkpoint_filter_fn` adapting its patch-16 weights to
  models with other patch sizes and grids (the `load_pretrained` path);
- r26: the ResNetV2 stem of `vit_small_r26_s32_224` (StdConv2dSame eps 1e-8, GroupNorm 32, 'same'
  padding) at reduced depth and width, on an odd input size.
This file is not a test module (pytest does not collect it) and does not import dgmoe.
"""
from __future__ import annotations

import json
import platform
import sys
from functools import partial
from pathlib import Path

import numpy as np
import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures"
COMMAND = "/work/parity-venv/bin/python tests/parity/record_timm.py"

POS_INPUTS = {"pos14": ((14, 14), 1), "pos7": ((7, 7), 1), "pos4x6": ((4, 6), 1), "pos14_noprefix": ((14, 14), 0),
              "pos14_2prefix": ((14, 14), 2)}
POS_CASES = [  # name, input, new grid, old grid passed explicitly (None: square)
    ("14to2", "pos14", (2, 2), None), ("14to4", "pos14", (4, 4), None), ("14to7", "pos14", (7, 7), None),
    ("14to28", "pos14", (28, 28), None), ("7to14", "pos7", (14, 14), None), ("14to5x9", "pos14", (5, 9), None),
    ("4x6to8x3", "pos4x6", (8, 3), (4, 6)), ("14to4_noprefix", "pos14_noprefix", (4, 4), None),
    ("14to7_2prefix", "pos14_2prefix", (7, 7), None),
]
PATCH_INPUTS = {"kernel16": (4, 3, 16, 16), "kernel8": (4, 3, 8, 8)}
PATCH_CASES = [("16to8", "kernel16", (8, 8)), ("16to4", "kernel16", (4, 4)), ("16to2", "kernel16", (2, 2)),
               ("16to7", "kernel16", (7, 7)), ("16to8x4", "kernel16", (8, 4)), ("8to16", "kernel8", (16, 16))]
VIT = dict(img_size=64, patch_size=16, embed_dim=32, depth=2, num_heads=2, num_classes=5)
LOAD_CASES = [("p8_32", 8, (32, 32)), ("p8_48", 8, (48, 48)), ("p4_32", 4, (32, 32)), ("p8_32x64", 8, (32, 64))]
R26 = dict(layers=(1, 1), channels=(128, 128), input=(2, 3, 37, 37))


def _normal(seed: int, shape, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    return torch.from_numpy((np.random.RandomState(seed).standard_normal(shape) * scale + offset).astype(np.float32))


def _deterministic_state(model: torch.nn.Module, seed: int, conv_offset: float = 0.0) -> dict[str, torch.Tensor]:
    """Every tensor of the state dict from its own seed: norm scales ~1, biases small, weights ~N(offset, .05^2)."""
    state = {}
    for i, (key, value) in enumerate(sorted(model.state_dict().items())):
        if key.endswith("bias"):
            state[key] = _normal(seed + i, value.shape, 0.1)
        elif "norm" in key and key.endswith("weight"):
            state[key] = _normal(seed + i, value.shape, 0.1, 1.0)
        elif key in ("pos_embed", "cls_token"):
            state[key] = _normal(seed + i, value.shape, 0.5)
        else:
            state[key] = _normal(seed + i, value.shape, 0.05, conv_offset if value.ndim == 4 else 0.0)
    return state


def _write(topic: str, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    import timm
    from safetensors.torch import save_file

    missing = set(tensors) ^ set(meta["tensors"])
    if missing:
        raise RuntimeError(
            f"{topic}: tensors without a description or descriptions without a tensor: {sorted(missing)}")
    meta = {"peer": "timm", "peer_version": timm.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "command": COMMAND, **meta}
    FIXTURES.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().clone() for k, v in tensors.items()}, str(FIXTURES / f"timm_{topic}.safetensors"))
    (FIXTURES / f"timm_{topic}.json").write_text(json.dumps(meta, indent=1) + "\n")


def record_resample() -> None:
    from timm.layers import resample_abs_pos_embed, resample_patch_embed

    tensors, what = {}, {}
    for i, (name, (grid, prefix)) in enumerate(POS_INPUTS.items()):
        tensors[name] = _normal(100 + i, (1, prefix + grid[0] * grid[1], 8))
        what[name] = f"input position embedding: {prefix} prefix token(s) + a {grid[0]}x{grid[1]} grid, dim 8"
    for i, (name, shape) in enumerate(PATCH_INPUTS.items()):
        tensors[name] = _normal(200 + i, shape)
        what[name] = f"input patch embedding kernel {list(shape)}"
    for name, src, new, old in POS_CASES:
        for antialias in (True, False):
            key = f"pos.{name}.{'antialias' if antialias else 'plain'}"
            tensors[key] = resample_abs_pos_embed(tensors[src], list(new), old_size=None if old is None else list(old),
                                                  num_prefix_tokens=POS_INPUTS[src][1], antialias=antialias)
            what[key] = f"resample_abs_pos_embed({src}, new_size={list(new)}, old_size={old}, antialias={antialias})"
    for name, src, new in PATCH_CASES:
        for antialias in (True, False):
            key = f"patch.{name}.{'antialias' if antialias else 'plain'}"
            tensors[key] = resample_patch_embed(tensors[src], list(new), antialias=antialias)
            what[key] = f"resample_patch_embed({src}, new_size={list(new)}, antialias={antialias})"
    _write("resample", tensors, {
        "pos_cases": [{"name": n, "input": s, "new_grid": list(g), "old_grid": None if o is None else list(o),
                       "num_prefix_tokens": POS_INPUTS[s][1]} for n, s, g, o in POS_CASES],
        "patch_cases": [{"name": n, "input": s, "new_size": list(g)} for n, s, g in PATCH_CASES],
        "tensors": what})


def record_vit() -> None:
    from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

    src = VisionTransformer(**VIT).eval()
    state = _deterministic_state(src, 300)
    src.load_state_dict(state, strict=True)
    tensors = {f"state.{k}": v for k, v in state.items()}
    what = {f"state.{k}": f"weight {k} of the source ViT (timm names)" for k in state}
    tensors["x"] = _normal(400, (1, 3, VIT["img_size"], VIT["img_size"]))
    what["x"] = "input image"
    with torch.no_grad():
        tensors["tokens"] = src.forward_features(tensors["x"])
        tensors["logits"] = src(tensors["x"])
    what["tokens"] = "source ViT forward_features(x) (final norm applied)"
    what["logits"] = "source ViT forward(x) in eval mode"
    for name, patch, img in LOAD_CASES:
        target = VisionTransformer(**{**VIT, "patch_size": patch, "img_size": img})
        for antialias in (True, False):
            adapted = checkpoint_filter_fn(dict(state), target, antialias=antialias)
            mode = "antialias" if antialias else "plain"
            call = f"checkpoint_filter_fn(source state, VisionTransformer(patch_size={patch}, img_size={list(img)}), " \
                   f"antialias={antialias})"
            tensors[f"load.{name}.{mode}.pos_embed"] = adapted["pos_embed"]
            what[f"load.{name}.{mode}.pos_embed"] = f"{call}['pos_embed']"
            kernel = f"load.patch{patch}.{mode}.patch_embed.proj.weight"  # the same for every img_size
            if kernel in tensors and not torch.equal(tensors[kernel], adapted["patch_embed.proj.weight"]):
                raise RuntimeError(f"{kernel} depends on the image size")
            tensors[kernel] = adapted["patch_embed.proj.weight"]
            what[kernel] = f"{call}['patch_embed.proj.weight'] (the same for every case with patch_size={patch})"
    _write("vit", tensors, {
        "model": {k: list(v) if isinstance(v, tuple) else v for k, v in VIT.items()},
        "load_cases": [{"name": n, "patch_size": p, "img_size": list(i)} for n, p, i in LOAD_CASES],
        "tensors": what})


def record_r26() -> None:
    from timm.layers import StdConv2dSame
    from timm.models.resnetv2 import ResNetV2

    stem = ResNetV2(layers=R26["layers"], channels=R26["channels"], num_classes=0, global_pool="", preact=False,
                    stem_type="same", conv_layer=partial(StdConv2dSame, eps=1e-8)).eval()
    state = _deterministic_state(stem, 500, conv_offset=0.3)
    stem.load_state_dict(state, strict=True)
    tensors = {f"state.{k}": v for k, v in state.items()}
    what = {f"state.{k}": f"weight {k} (timm names; convolution kernels have mean 0.3, so standardisation matters)"
            for k in state}
    tensors["x"] = _normal(600, R26["input"])
    what["x"] = "input images (odd size: asymmetric 'same' padding in the stem, symmetric later)"
    with torch.no_grad():
        tensors["features"] = stem.forward_features(tensors["x"])
    what["features"] = "ResNetV2(...).forward_features(x) in eval mode"
    _write("r26", tensors, {"model": {"layers": list(R26["layers"]), "channels": list(R26["channels"]),
                                      "stem_type": "same", "preact": False, "conv_layer": "StdConv2dSame(eps=1e-8)",
                                      "norm_layer": "GroupNormAct(32)"}, "tensors": what})


if __name__ == "__main__":
    torch.set_num_threads(1)
    for record in (record_resample, record_vit, record_r26):
        record()
    total = sum(p.stat().st_size for p in FIXTURES.glob("timm_*"))
    print(f"wrote {len(list(FIXTURES.glob('timm_*')))} files, {total / 1e3:.0f} kB, timm "
          f"{__import__('timm').__version__}, torch {torch.__version__}", file=sys.stderr)
