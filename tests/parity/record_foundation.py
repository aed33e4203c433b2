"""Record the foundation backbones' peers' own numbers for tests/parity/test_foundation_parity.py. Needs the
peers, which dgmoe does not depend on, in a throwaway directory (not committed, not in CI):

    pip install --no-deps --target /tmp/peers open_clip_torch==3.3.0 timm==1.0.31 "transformers<5" \\
        "huggingface_hub<1.0" tokenizers==0.22.1 torchvision ftfy regex wcwidth
    git clone https://github.com/facebookresearch/dinov2 && cp -r dinov2/dinov2 /tmp/peers/  # DINOv2's own code
    PYTHONPATH=/tmp/peers python tests/parity/record_foundation.py

(torchvision's PyPI wheel does not load its compiled ops against every torch: where `import timm` fails in
`torchvision/_meta_registrations.py`, empty that file in /tmp/peers; nothing recorded here uses torchvision.)

Each case is a peer's own model at a tiny size (width 32, depth 2, 2 heads), with random weights from numpy's
legacy `RandomState` (a frozen stream): its state dict is written in the peer's own format, as the file a
user holds (tests/parity/fixtures/foundation/<case>.<ext>), and the input and the peer's output go to
foundation_io.safetensors; foundation.json names the peer, its version, this command, the dgmoe model each
case loads into, and every tensor. This file is not a test module and does not import dgmoe.
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
FILES = FIXTURES / "foundation"
COMMAND = "PYTHONPATH=/tmp/peers python tests/parity/record_foundation.py"
WIDTH, DEPTH, HEADS, EMBED = 32, 2, 2, 48
#: the dgmoe model every case's file loads into (`create_model(name, **overrides, pretrained=file)`)
CLIP_TINY = dict(img_size=32, patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, num_classes=0)
DINO_TINY = dict(img_size=56, patch_size=14, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, num_classes=0)


def _normal(seed: int, shape, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    values = np.random.RandomState(seed).standard_normal(tuple(shape)) * scale + offset
    return torch.from_numpy(np.asarray(values, dtype=np.float32).reshape(tuple(shape)))


def _random_state(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Every float tensor from its own seed: norm scales and LayerScale ~1, biases small, weights ~N(0, .1^2),
    embeddings and tokens ~N(0, .5^2); integer buffers (HF's position_ids) kept."""
    state = {}
    for i, (key, value) in enumerate(sorted(model.state_dict().items())):
        if not value.is_floating_point():
            state[key] = value.clone()
        elif key.endswith("bias"):
            state[key] = _normal(seed + i, value.shape, 0.1)
        elif value.ndim == 1 and ("norm" in key or "ln_" in key or "gamma" in key):
            state[key] = _normal(seed + i, value.shape, 0.1, 1.0)
        elif value.ndim <= 1 or "embed" in key or "token" in key or "class" in key or key.endswith("proj") \
                or value.ndim == 3:
            state[key] = _normal(seed + i, value.shape, 0.5)
        else:
            state[key] = _normal(seed + i, value.shape, 0.1)
    model.load_state_dict(state, strict=True)
    return state


def _save(case: str, state: dict[str, torch.Tensor], ext: str) -> str:
    from safetensors.torch import save_file

    FILES.mkdir(parents=True, exist_ok=True)
    path = FILES / f"{case}.{ext}"
    state = {k: v.contiguous().clone() for k, v in state.items()}
    if ext == "safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    return str(path.relative_to(FIXTURES))


def record_open_clip(cases: list, io: dict) -> None:
    import open_clip
    from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg

    for case, quick, model in (("openai_clip_quickgelu", True, "vit_base_patch16_clip_quickgelu_224"),
                               ("openclip_gelu", False, "vit_base_patch16_clip_224")):
        vision = CLIPVisionCfg(layers=DEPTH, width=WIDTH, head_width=WIDTH // HEADS, patch_size=8, image_size=32)
        text = CLIPTextCfg(context_length=8, vocab_size=50, width=16, heads=2, layers=1)
        peer = CLIP(EMBED, vision, text, quick_gelu=quick).eval()
        state = _random_state(peer, 1000 + 100 * quick)
        x = _normal(2000 + quick, (2, 3, 32, 32))
        with torch.no_grad():
            io[f"{case}.x"], io[f"{case}.out"] = x, peer.encode_image(x)
        cases.append(dict(case=case, peer="open_clip", peer_version=open_clip.__version__,
                          file=_save(case, state, "pth"), model=model, overrides=dict(CLIP_TINY, proj_dim=EMBED),
                          peer_call=f"open_clip CLIP(quick_gelu={quick}) encode_image(x), whole CLIP state dict "
                                    "(text tower included)"))


def record_hf_clip(cases: list, io: dict) -> None:
    import transformers
    from transformers import CLIPVisionConfig, CLIPVisionModel, CLIPVisionModelWithProjection

    config = dict(hidden_size=WIDTH, intermediate_size=4 * WIDTH, num_hidden_layers=DEPTH, num_attention_heads=HEADS,
                  image_size=32, patch_size=8, projection_dim=EMBED, layer_norm_eps=1e-5, attn_implementation="eager")
    for case, cls, act, model, proj in (
            ("hf_clip_with_projection", CLIPVisionModelWithProjection, "quick_gelu",
             "vit_base_patch16_clip_quickgelu_224", EMBED),
            ("hf_clip_vision", CLIPVisionModel, "gelu", "vit_base_patch16_clip_224", None)):
        peer = cls(CLIPVisionConfig(hidden_act=act, **config)).eval()
        state = _random_state(peer, 3000 + 100 * (proj is None))
        x = _normal(4000 + (proj is None), (2, 3, 32, 32))
        with torch.no_grad():
            out = peer(pixel_values=x)
        io[f"{case}.x"] = x
        io[f"{case}.out"] = out.image_embeds if proj else out.pooler_output
        cases.append(dict(case=case, peer="transformers", peer_version=transformers.__version__,
                          file=_save(case, state, "safetensors"), model=model,
                          overrides=dict(CLIP_TINY, proj_dim=proj or 0),  # 0: no projection
                          peer_call=f"{cls.__name__}(hidden_act={act!r})(x)."
                                    f"{'image_embeds' if proj else 'pooler_output'}"))


def record_timm_clip(cases: list, io: dict) -> None:
    import timm
    from timm.models.vision_transformer import VisionTransformer

    peer = VisionTransformer(img_size=32, patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, pre_norm=True,
                             norm_layer=partial(torch.nn.LayerNorm, eps=1e-5), act_layer="quick_gelu",
                             num_classes=EMBED).eval()
    state = _random_state(peer, 5000)
    state["head.bias"] = torch.zeros(EMBED)  # timm's CLIP towers: CLIP's projection is bias-free
    peer.load_state_dict(state)
    x = _normal(5500, (2, 3, 32, 32))
    with torch.no_grad():
        io["timm_clip_quickgelu.x"], io["timm_clip_quickgelu.out"] = x, peer(x)
    cases.append(dict(case="timm_clip_quickgelu", peer="timm", peer_version=timm.__version__,
                      file=_save("timm_clip_quickgelu", state, "safetensors"),
                      model="vit_base_patch16_clip_quickgelu_224",
                      overrides=dict(CLIP_TINY, proj_dim=EMBED),
                      peer_call="timm VisionTransformer(pre_norm=True, act_layer='quick_gelu', LayerNorm eps 1e-5, "
                                "num_classes=48: the projection as head)(x)"))


def record_dinov2(cases: list, io: dict) -> None:
    import timm
    from dinov2.models.vision_transformer import DinoVisionTransformer
    from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

    for regs in (0, 4):
        suffix = "_reg4" if regs else ""
        model = f"vit_small_patch14{suffix}_dinov2"
        # the hub's settings (dinov2/hub/backbones.py): without registers interpolate_offset 0.1, no antialias;
        # with registers offset 0, antialias
        hub = dict(interpolate_offset=0.0, interpolate_antialias=True) if regs else \
            dict(interpolate_offset=0.1, interpolate_antialias=False)
        for img, grid in ((56, "the checkpoint's own grid"), (84, "a 6x6 grid interpolated to 4x4 at the forward")):
            case = f"dinov2_hub{suffix}_{img}px"
            peer = DinoVisionTransformer(img_size=img, patch_size=14, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS,
                                         init_values=1.0, num_register_tokens=regs, block_chunks=0, **hub).eval()
            state = _random_state(peer, 6000 + 10 * regs + img)
            x = _normal(7000 + regs, (2, 3, 56, 56))
            # DINOv2's own forward on 56 px images: the class token after the final norm; at 84 px its position
            # embedding is interpolated to the 4x4 grid by its own interpolate_pos_encoding
            with torch.no_grad():
                io[f"{case}.x"], io[f"{case}.out"] = x, peer(x)
            cases.append(dict(case=case, file=_save(case, state, "pth"), model=model, overrides=DINO_TINY,
                              peer="dinov2", peer_version=_dinov2_commit(),
                              peer_call=f"DinoVisionTransformer(img_size={img}, num_register_tokens={regs}, "
                                        f"{', '.join(f'{k}={v}' for k, v in hub.items())})(x): {grid}"))
            if img == 56:
                continue
            # timm's conversion of the same hub file, resampled by timm at load: its own convention
            kwargs = dict(img_size=56, patch_size=14, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, init_values=1e-5,
                          num_classes=0, reg_tokens=regs, no_embed_class=bool(regs))
            timm_model = VisionTransformer(**kwargs).eval()
            converted = checkpoint_filter_fn(dict(state), timm_model)
            timm_model.load_state_dict(converted, strict=True)
            timm_case = f"timm_dinov2{suffix}"
            with torch.no_grad():
                io[f"{timm_case}.x"], io[f"{timm_case}.out"] = x, timm_model(x)
            cases.append(dict(case=timm_case, peer="timm", peer_version=timm.__version__,
                              file=_save(timm_case, converted, "safetensors"), model=model, overrides=DINO_TINY,
                              peer_call=f"timm checkpoint_filter_fn(the {case} hub state, VisionTransformer("
                                        f"img_size=56, reg_tokens={regs}, no_embed_class={bool(regs)})) then its "
                                        "forward(x): timm's names and timm's resampling at load"))


def _dinov2_commit() -> str:
    return "facebookresearch/dinov2@b8931f7"


if __name__ == "__main__":
    torch.set_num_threads(1)
    cases: list = []
    io: dict = {}
    for record in (record_open_clip, record_hf_clip, record_timm_clip, record_dinov2):
        record(cases, io)
    from safetensors.torch import save_file

    save_file({k: v.contiguous().clone() for k, v in io.items()}, str(FIXTURES / "foundation_io.safetensors"))
    meta = {"command": COMMAND, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "cases": cases,
            "tensors": {k: ("input image" if k.endswith(".x") else "the peer's output (see the case's peer_call)")
                        for k in io}}
    (FIXTURES / "foundation.json").write_text(json.dumps(meta, indent=1) + "\n")
    total = sum(p.stat().st_size for p in FILES.iterdir()) + (FIXTURES / "foundation_io.safetensors").stat().st_size
    print(f"wrote {len(cases)} cases, {total / 1e3:.0f} kB", file=sys.stderr)
