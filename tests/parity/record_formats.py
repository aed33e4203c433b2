"""Record the checkpoint files users hold beside record_foundation.py's, with the peers' own numbers, for
tests/parity/test_checkpoint_formats_parity.py: Hugging Face DINOv2 (`Dinov2Model`, `Dinov2WithRegistersModel`)
and CLIP (`CLIPVisionModel`, written by transformers 5 without the `vision_model.` prefix) folders written by
`save_pretrained`, an open_clip hub folder's `open_clip_config.json`, and a peft LoRA adapter trained on a
timm-named ViT (`adapter_config.json` + `adapter_model.safetensors`). Needs the peers in a throwaway directory
(not committed, not in CI); two runs, one per transformers major version, each replacing its own cases:

    pip install --no-deps --target /tmp/peers open_clip_torch==3.3.0 timm==1.0.31 "transformers<5" \\
        "huggingface_hub<1.0" peft==0.17.1 tokenizers==0.22.1 torchvision safetensors accelerate psutil pyyaml \\
        ftfy regex wcwidth
    pip install --no-deps --target /tmp/peers5 "transformers>=5,<6" "huggingface_hub>=1" "tokenizers>=0.23" \\
        httpx2 httpcore2 anyio idna truststore h11 sniffio certifi click fsspec tqdm typer hf-xet typing-extensions
    PYTHONPATH=/tmp/peers python tests/parity/record_formats.py
    PYTHONPATH=/tmp/peers5:/tmp/peers python tests/parity/record_formats.py

(where `import timm` fails in torchvision's `_meta_registrations.py`, empty that file: nothing here uses it.)

Every case is a tiny model (width 32, depth 2, 2 heads) with random weights from numpy's legacy `RandomState`
(a frozen stream, record_foundation.py's `_random_state`); the files go to tests/parity/fixtures/formats/<case>/
as the peer wrote them, the inputs and the peer's outputs to formats_io.safetensors, and formats.json names each
case's peer, its version, the regenerating command, the dgmoe model it loads into and every tensor. This file is
not a test module and does not import dgmoe.
"""
from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_foundation import _normal, _random_state  # noqa: E402  (the same frozen weights stream)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FILES = FIXTURES / "formats"
WIDTH, DEPTH, HEADS = 32, 2, 2
#: the grid the HF DINOv2 files are trained at (98 px: 7 x 7 patches of 14 px), and the sizes they are run at:
#: 224 px (16 x 16) and 70 px (5 x 5), both resampled by transformers' own forward; one image per size, shared by
#: both cases and stored in float16 (its values are exactly representable: the peers see the same float32 image)
DINO_FILE_SIZE, DINO_SIZES = 98, (224, 70)
DINO_TINY = dict(patch_size=14, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, num_classes=0)
CLIP_TINY = dict(img_size=32, patch_size=8, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, num_classes=0)
VIT_TINY = dict(img_size=28, patch_size=7, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS, num_classes=5)


def _folder(case: str) -> Path:
    path = FILES / case
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _rel(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def record_hf_dinov2(cases: list, io: dict, command: str) -> None:
    import transformers
    from transformers import Dinov2Config, Dinov2Model, Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    common = dict(hidden_size=WIDTH, num_hidden_layers=DEPTH, num_attention_heads=HEADS, mlp_ratio=4,
                  image_size=DINO_FILE_SIZE, patch_size=14, attn_implementation="eager")
    for case, cls, config, model in (
            ("hf_dinov2", Dinov2Model, Dinov2Config(**common), "vit_small_patch14_dinov2"),
            ("hf_dinov2_reg4", Dinov2WithRegistersModel, Dinov2WithRegistersConfig(num_register_tokens=4, **common),
             "vit_small_patch14_reg4_dinov2")):
        peer = cls(config).eval()
        _random_state(peer, 8000 + 100 * (cls is Dinov2WithRegistersModel))
        folder = _folder(case)
        peer.save_pretrained(str(folder))
        for size in DINO_SIZES:
            x = _normal(8500 + size, (1, 3, size, size)).half()
            io[f"hf_dinov2_input.{size}.x"] = x
            with torch.no_grad():
                out = peer(pixel_values=x.float())
            io[f"{case}.{size}.pooler_output"] = out.pooler_output
            io[f"{case}.{size}.last_hidden_state"] = out.last_hidden_state
        cases.append(dict(case=case, peer="transformers", peer_version=transformers.__version__, command=command,
                          folder=_rel(folder), model=model, overrides=DINO_TINY, sizes=list(DINO_SIZES),
                          inputs="hf_dinov2_input.<size>.x (float16: cast to float32)",
                          peer_call=f"{cls.__name__}(image_size={DINO_FILE_SIZE}).save_pretrained(folder); "
                                    "peer(pixel_values=x).pooler_output and .last_hidden_state at each size"))


def record_hf_clip(cases: list, io: dict, command: str) -> None:
    import transformers
    from transformers import CLIPVisionConfig, CLIPVisionModel, CLIPVisionModelWithProjection

    config = dict(hidden_size=WIDTH, intermediate_size=4 * WIDTH, num_hidden_layers=DEPTH, num_attention_heads=HEADS,
                  image_size=32, patch_size=8, projection_dim=48, layer_norm_eps=1e-5, attn_implementation="eager")
    major = transformers.__version__.split(".")[0]
    for case, cls, act, model, proj in (
            (f"hf{major}_clip_vision", CLIPVisionModel, "gelu", "vit_base_patch16_clip_224", 0),
            (f"hf{major}_clip_with_projection", CLIPVisionModelWithProjection, "quick_gelu",
             "vit_base_patch16_clip_quickgelu_224", 48)):
        peer = cls(CLIPVisionConfig(hidden_act=act, **config)).eval()
        _random_state(peer, 9000 + 100 * bool(proj))
        folder = _folder(case)
        peer.save_pretrained(str(folder))
        x = _normal(9500 + proj, (2, 3, 32, 32))
        with torch.no_grad():
            out = peer(pixel_values=x)
        io[f"{case}.x"], io[f"{case}.out"] = x, out.image_embeds if proj else out.pooler_output
        cases.append(dict(case=case, peer="transformers", peer_version=transformers.__version__, command=command,
                          folder=_rel(folder), model=model, overrides=dict(CLIP_TINY, proj_dim=proj),
                          peer_call=f"{cls.__name__}(hidden_act={act!r}).save_pretrained(folder); peer(x)."
                                    f"{'image_embeds' if proj else 'pooler_output'}"))


def record_open_clip_folder(cases: list, io: dict, command: str) -> None:
    import open_clip
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
    from open_clip.model import CLIP
    from open_clip.push_to_hf_hub import save_config_for_hf
    from safetensors.torch import save_file

    vision = dict(layers=DEPTH, width=WIDTH, head_width=WIDTH // HEADS, patch_size=8, image_size=32)
    text = dict(context_length=8, vocab_size=50, width=16, heads=2, layers=1)
    model_cfg = dict(embed_dim=48, quick_gelu=True, vision_cfg=vision, text_cfg=text)
    peer = CLIP(**model_cfg).eval()
    _random_state(peer, 9700)
    peer.visual.image_mean, peer.visual.image_std = OPENAI_DATASET_MEAN, OPENAI_DATASET_STD  # as create_model sets
    folder = _folder("open_clip_hub_quickgelu")
    save_file({k: v.contiguous() for k, v in peer.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    save_config_for_hf(peer, folder / "open_clip_config.json", model_config=model_cfg)
    x = _normal(9800, (2, 3, 32, 32))
    with torch.no_grad():
        io["open_clip_hub_quickgelu.x"], io["open_clip_hub_quickgelu.out"] = x, peer.encode_image(x)
    cases.append(dict(case="open_clip_hub_quickgelu", peer="open_clip", peer_version=open_clip.__version__,
                      command=command, folder=_rel(folder), model="vit_base_patch16_clip_quickgelu_224",
                      overrides=dict(CLIP_TINY, proj_dim=48),
                      peer_call="open_clip CLIP(quick_gelu=True): state dict as open_clip_model.safetensors, "
                                "push_to_hf_hub.save_config_for_hf(...) as open_clip_config.json; encode_image(x)"))


def record_peft_lora(cases: list, io: dict, command: str) -> None:
    import peft
    import timm
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file
    from timm.models.vision_transformer import VisionTransformer

    base = VisionTransformer(**VIT_TINY).eval()
    base_state = _random_state(base, 9900)
    folder = _folder("peft_lora")
    save_file({k: v.contiguous() for k, v in base_state.items()}, str(folder / "base.safetensors"))
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["qkv", "fc1"], modules_to_save=["head"])
    model = get_peft_model(base, config).eval()
    adapter = {k: v for k, v in model.state_dict().items() if "lora_" in k or "modules_to_save" in k}
    with torch.no_grad():
        for i, (key, value) in enumerate(sorted(adapter.items())):  # a trained adapter: B != 0, head moved
            value.copy_(_normal(9950 + i, value.shape, 0.2))
    model.save_pretrained(str(folder / "adapter"))
    (folder / "adapter" / "README.md").unlink(missing_ok=True)  # peft's model-card stub, not the adapter
    x = _normal(9990, (2, 3, 28, 28))
    with torch.no_grad():
        io["peft_lora.x"], io["peft_lora.out"] = x, model(x)
        io["peft_lora.merged"] = model.merge_and_unload()(x)
    cases.append(dict(case="peft_lora", peer="peft", peer_version=peft.__version__, timm_version=timm.__version__,
                      command=command, folder=_rel(folder), model="vit_tiny_patch16_224", overrides=VIT_TINY,
                      peer_call="timm VisionTransformer(**overrides) with base.safetensors; get_peft_model(LoraConfig("
                                "r=4, lora_alpha=8, target_modules=['qkv', 'fc1'], modules_to_save=['head'])), "
                                "adapter weights random, save_pretrained(adapter/); model(x), and "
                                "merge_and_unload()(x) as .merged"))


def record_peft_lora_open_clip(cases: list, io: dict, command: str) -> None:
    """peft's LoRA on open_clip's image tower (`CLIP.visual`), on the FFN's c_fc and c_proj: open_clip's
    attention is torch's nn.MultiheadAttention, whose forward reads out_proj's weight without calling it, so a
    LoRA there would be inert in open_clip."""
    import open_clip
    import peft
    from open_clip.model import CLIP
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    vision = dict(layers=DEPTH, width=WIDTH, head_width=WIDTH // HEADS, patch_size=8, image_size=32)
    text = dict(context_length=8, vocab_size=50, width=16, heads=2, layers=1)
    tower = CLIP(embed_dim=48, quick_gelu=True, vision_cfg=vision, text_cfg=text).visual.eval()
    base_state = _random_state(tower, 9920)
    folder = _folder("peft_lora_open_clip")
    save_file({k: v.contiguous() for k, v in base_state.items()}, str(folder / "base.safetensors"))
    model = get_peft_model(tower, LoraConfig(r=2, lora_alpha=6, target_modules=["c_fc", "c_proj"])).eval()
    with torch.no_grad():
        for i, (key, value) in enumerate(sorted((k, v) for k, v in model.state_dict().items() if "lora_" in k)):
            value.copy_(_normal(9960 + i, value.shape, 0.2))
    model.save_pretrained(str(folder / "adapter"))
    (folder / "adapter" / "README.md").unlink(missing_ok=True)
    x = _normal(9995, (2, 3, 32, 32))
    with torch.no_grad():
        io["peft_lora_open_clip.x"], io["peft_lora_open_clip.out"] = x, model(x)
    cases.append(dict(case="peft_lora_open_clip", peer="peft", peer_version=peft.__version__,
                      open_clip_version=open_clip.__version__, command=command, folder=_rel(folder),
                      model="vit_base_patch16_clip_quickgelu_224", overrides=dict(CLIP_TINY, proj_dim=48),
                      peer_call="open_clip CLIP(quick_gelu=True).visual with base.safetensors; get_peft_model("
                                "LoraConfig(r=2, lora_alpha=6, target_modules=['c_fc', 'c_proj'])), adapter weights "
                                "random, save_pretrained(adapter/); model(x)"))


if __name__ == "__main__":
    import transformers

    torch.set_num_threads(1)
    five = int(transformers.__version__.split(".")[0]) >= 5
    command = ("PYTHONPATH=/tmp/peers5:/tmp/peers" if five else "PYTHONPATH=/tmp/peers") + \
        " python tests/parity/record_formats.py"
    meta_path, io_path = FIXTURES / "formats.json", FIXTURES / "formats_io.safetensors"
    from safetensors.torch import load_file, save_file

    cases: list = []
    io: dict = {}
    recorders = (record_hf_clip,) if five else (record_hf_dinov2, record_hf_clip, record_open_clip_folder,
                                                  record_peft_lora, record_peft_lora_open_clip)
    for record in recorders:
        record(cases, io, command)
    # the other run's cases are kept
    old = json.loads(meta_path.read_text()) if meta_path.is_file() else {"cases": []}
    mine = {c["case"] for c in cases}
    kept = [c for c in old["cases"] if c["case"] not in mine]
    old_io = load_file(str(io_path)) if io_path.is_file() else {}
    io = {**{k: v for k, v in old_io.items() if k.split(".")[0] not in mine}, **io}
    save_file({k: v.contiguous().clone() for k, v in io.items()}, str(io_path))
    meta = {"commands": sorted({c["command"] for c in kept + cases}), "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version(),
            "cases": sorted(kept + cases, key=lambda c: c["case"]),
            "tensors": {k: ("input image" if k.endswith(".x") else "the peer's output (see the case's peer_call)")
                        for k in sorted(io)}}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(cases)} cases ({len(kept)} kept)", file=sys.stderr)
