"""Record CLIP's text half from the peers' own code for tests/parity/test_clip_text_parity.py. Needs the peers,
which dgmoe does not depend on, in a throwaway directory (not committed, not in CI):

    pip install --no-deps --target /tmp/peers open_clip_torch==3.3.0 "transformers<5" "huggingface_hub<1.0" \\
        tokenizers==0.22.1 timm==1.0.31 torchvision ftfy regex wcwidth
    PYTHONPATH=/tmp/peers python tests/parity/record_clip_text.py

(where `import open_clip` fails in torchvision's `_meta_registrations.py`, empty that file in /tmp/peers.)

Three records, none of which imports dgmoe:
- tokens (clip_tokens.json): open_clip's `SimpleTokenizer` ids (its default `clean='lower'`, 77 tokens) of every
  class name the catalogue declares (read from dgmoe's source files as text) in every template of OpenAI's 80
  and CLIP's default prompt, plus non-ASCII, HTML-escaped, curly-quoted, full-width, over-long strings;
- text towers (clip_text.json, clip_text_io.safetensors): open_clip's `CLIP` (QuickGELU and GELU) and
  transformers' `CLIPTextModelWithProjection` / `CLIPModel` with random weights (numpy's legacy `RandomState`),
  tiny widths with the real B/16 and L/14 text towers' 64-wide heads and embedding = width, a 77-token context,
  a 320-id vocabulary; input ids with the end token (the largest id) at varying places; the peer's text features.
  No weight file is stored: each case's manifest ([key, shape, seed, scale, offset] per tensor, the peer's own
  key names) regenerates the peer's state dict, which the test writes in the peer's file format and loads;
- zero-shot (in the same files): an open_clip CLIP with a tiny image and text tower, its zero-shot classifier
  (`build_zero_shot_classifier`) for 5 class names x 3 templates tokenised by open_clip's tokenizer with every
  id folded into the small vocabulary, and the logits `exp(logit_scale) * normalize(encode_image(x)) @ W`.
"""
from __future__ import annotations

import ast
import copy
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SRC = Path(__file__).resolve().parents[2] / "src" / "dgmoe"
COMMAND = "PYTHONPATH=/tmp/peers python tests/parity/record_clip_text.py"
VOCAB, CONTEXT = 320, 77
#: (case, width, heads, layers): the B/16 text tower is 512 wide with 8 heads, L/14's 768 with 12 (64-wide heads)
SHAPES = (("b16", 128, 2, 2), ("l14", 192, 3, 2))
ZS_NAMES = ("dog", "elephant", "giraffe", "guitar", "house")
ZS_TEMPLATES = ("a photo of a {}.", "a sketch of the {}.", "itap of my {}.")


def _normal(seed: int, shape, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    values = np.random.RandomState(seed).standard_normal(tuple(shape)) * scale + offset
    return torch.from_numpy(np.asarray(values, dtype=np.float32).reshape(tuple(shape)))


def _random_state(model: torch.nn.Module, seed: int, io: dict, case: str) -> tuple[dict[str, torch.Tensor], list]:
    """Every float tensor from its own seed (as record_foundation.py; logit_scale log(1/0.07) + N(0, .1^2)), and
    the manifest that regenerates it without the peer: [key, shape, seed, scale, offset] per float tensor (the
    fixtures hold no weight file); other tensors (HF's position_ids) go to `io` as `<case>.state.<key>`."""
    state, manifest = {}, []
    for i, (key, value) in enumerate(sorted(model.state_dict().items())):
        if not value.is_floating_point():
            state[key] = io[f"{case}.state.{key}"] = value.clone()
            continue
        if key == "logit_scale":
            scale, offset = 0.1, float(np.log(1 / 0.07))
        elif key.endswith("bias"):
            scale, offset = 0.1, 0.0
        elif value.ndim == 1 and ("norm" in key or "ln_" in key):
            scale, offset = 0.1, 1.0
        elif value.ndim <= 1 or "embed" in key or "token" in key or "class" in key or key.endswith("proj") \
                or key.endswith("projection") or value.ndim == 3:
            scale, offset = 0.5, 0.0
        else:
            scale, offset = 0.1, 0.0
        state[key] = _normal(seed + i, value.shape, scale, offset)
        manifest.append([key, list(value.shape), seed + i, scale, offset])
    model.load_state_dict(state, strict=True)
    return state, manifest


def _ids(seed: int, n: int = 4) -> torch.Tensor:
    """[n, 77] ids: start token VOCAB-2, random ids below it, the end token VOCAB-1 (the largest) at rows' own
    places (the last one at the context's end), zeros after it."""
    rng = np.random.RandomState(seed)
    ids = torch.zeros(n, CONTEXT, dtype=torch.long)
    for row, end in enumerate([5, 17, 40, CONTEXT - 1][:n]):
        ids[row, 0] = VOCAB - 2
        ids[row, 1:end] = torch.from_numpy(rng.randint(1, VOCAB - 2, size=end - 1))
        ids[row, end] = VOCAB - 1
    return ids


# ----- the tokenizer ----------------------------------------------------------------------------------------
def _tuples(path: Path) -> dict[str, tuple]:
    """Module-level tuples of string literals in a source file, by name (read as text, not imported)."""
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and len(node.targets) == 1:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if value and all(isinstance(v, str) for v in value):
                out[getattr(node.targets[0], "id", "")] = value
    return out


def token_strings() -> list[str]:
    names = _tuples(SRC / "data" / "class_names.py")
    names.update({k: v for k, v in _tuples(SRC / "data" / "wilds" / "fmow.py").items() if k == "FMOW_CATEGORIES"})
    names.update({k: v for k, v in _tuples(SRC / "data" / "wilds" / "camelyon.py").items() if k == "CAMELYON_CLASSES"})
    prompts = _tuples(SRC / "data" / "prompts.py")
    templates = prompts["OPENAI_IMAGENET"] + prompts["DOMAINBED"]
    strings = []
    for k, (dataset, classes) in enumerate(sorted(names.items())):
        for i, name in enumerate(classes):
            name = name.replace("_", " ")
            strings.append(templates[-1].format(name))  # every class in CLIP's default prompt
            strings.append(templates[(7 * i + k) % 80].format(name))  # and in one of OpenAI's 80, in turn
    strings += [t.format(n) for t in templates for n in ("dog", "The Eiffel Tower")]  # every template
    strings += [
        "a photo of a café", "naïve résumé über straße", "Ελληνικά γράμματα", "кошка на крыше", "日本語のテキスト",
        "中文 类别 名称", "한국어 문장", "emoji 🐶🐱 and ✨", "math ∑ ∫ √ ≠ ±", "full-width ＡＢＣ　ｄｅｆ １２３",
        "ligature ﬁsh and ﬂower ﬀ", "“curly” ‘quotes’ don’t", "&amp; &lt;b&gt; &quot;x&quot; &eacute;",
        "&amp;amp;amp; nested", "<b>bold</b> &amp; tags", "a\r<b>&amp;\nx &amp; y",
        "x\u2028&amp;<\n&amp;", "tabs\tand\nnew\r\nlines   spaces", "  padded  ",
        "UPPER lower MiXeD", "numbers 1234567890 ²³ ½ Ⅻ", "don't can't we'll they're I'm you've he'd",
        "rock'n'roll ''s 's 'S 'T", "hyphen-ated t-shirt teddy-bear", "under_score snake_case",
        "punct!!! ??? ... --- ;;; (x) [y] {z}", "", " ", "a", "é", "Ø ø Å å Æ æ", "ß ẞ ǅ Ĳ", "e\u0301 composed",
        "zero\u200bwidth", "control\x07chars\x1b[31mred\x1b[0m", "c1 \x85 \x96 \x9d chars", "<|startoftext|>",
        "<start_of_text> <end_of_text> in text", "a b c d e f g h i j k l m n o p q r s t u v w x y z",
        "x" * 300, " ".join(["word"] * 100), " ".join(f"token{i}" for i in range(120)), "🐶" * 50,
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
    ]
    return strings


def record_tokens() -> dict:
    import open_clip
    from open_clip.tokenizer import SimpleTokenizer

    strings = token_strings()
    ids = SimpleTokenizer(context_length=CONTEXT)(strings)
    rows = [[int(i) for i in row[:int((row != 0).sum())]] for row in ids]
    return {"command": COMMAND, "peer": "open_clip", "peer_version": open_clip.__version__,
            "peer_call": "open_clip.tokenizer.SimpleTokenizer(context_length=77)(strings), each row's nonzero ids",
            "context_length": CONTEXT, "strings": strings, "ids": rows}


# ----- the text towers and the zero-shot classifier ---------------------------------------------------------
def record_open_clip(cases: list, io: dict) -> None:
    import open_clip
    from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg

    vision = CLIPVisionCfg(layers=2, width=32, head_width=16, patch_size=8, image_size=32)
    for k, (shape, width, heads, layers) in enumerate(SHAPES):
        for quick in (True, False):
            case = f"open_clip_{shape}_{'quickgelu' if quick else 'gelu'}"
            text = CLIPTextCfg(context_length=CONTEXT, vocab_size=VOCAB, width=width, heads=heads, layers=layers)
            peer = CLIP(width, vision, text, quick_gelu=quick).eval()
            _, manifest = _random_state(peer, 5000 + 100 * k + 10 * quick, io, case)
            ids = _ids(6000 + 10 * k + quick)
            with torch.no_grad():
                io[f"{case}.ids"], io[f"{case}.out"] = ids, peer.encode_text(ids)
                io[f"{case}.out64"] = copy.deepcopy(peer).double().encode_text(ids)  # the function, without rounding
            cases.append(dict(case=case, peer="open_clip", peer_version=open_clip.__version__,
                              format="pth", state=manifest, activation="quick_gelu" if quick else "gelu",
                              width=width, heads=heads, layers=layers,
                              peer_call=f"open_clip CLIP(quick_gelu={quick}).encode_text(ids), whole CLIP state dict"))


def record_hf(cases: list, io: dict) -> None:
    import transformers
    from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPTextModelWithProjection

    for k, (shape, width, heads, layers) in enumerate(SHAPES):
        act = "quick_gelu" if k == 0 else "gelu"
        text = dict(vocab_size=VOCAB, hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers,
                    num_attention_heads=heads, max_position_embeddings=CONTEXT, hidden_act=act, layer_norm_eps=1e-5,
                    projection_dim=width, bos_token_id=VOCAB - 2, eos_token_id=VOCAB - 1, pad_token_id=0,
                    attn_implementation="eager")
        for case, build in ((f"hf_text_projection_{shape}",
                             lambda: CLIPTextModelWithProjection(CLIPTextConfig(**text))),
                            (f"hf_clip_model_{shape}", lambda: CLIPModel(CLIPConfig(
                                text_config=text, vision_config=dict(hidden_size=32, intermediate_size=64,
                                                                     num_hidden_layers=1, num_attention_heads=2,
                                                                     image_size=32, patch_size=8),
                                projection_dim=width)))):
            peer = build().eval()
            _, manifest = _random_state(peer, 7000 + 100 * k + 10 * ("model" in case), io, case)
            ids = _ids(8000 + 10 * k + ("model" in case))
            with torch.no_grad():
                out = peer(input_ids=ids).text_embeds if "projection" in case else peer.get_text_features(input_ids=ids)
                wide = copy.deepcopy(peer).double()
                default = torch.get_default_dtype()
                torch.set_default_dtype(torch.float64)  # transformers builds its causal mask in the default dtype
                try:
                    out64 = (wide(input_ids=ids).text_embeds if "projection" in case
                             else wide.get_text_features(input_ids=ids))
                finally:
                    torch.set_default_dtype(default)
            io[f"{case}.ids"], io[f"{case}.out"], io[f"{case}.out64"] = ids, out, out64
            cases.append(dict(case=case, peer="transformers", peer_version=transformers.__version__,
                              format="safetensors", state=manifest, activation=act, width=width, heads=heads,
                              layers=layers, peer_call=(f"{type(peer).__name__}(hidden_act={act!r}, eos_token_id="
                                                        f"{VOCAB - 1})" + (".text_embeds" if "projection" in case
                                                                           else ".get_text_features(input_ids)"))))


class FoldedTokenizer:
    """open_clip's tokenizer with every id folded into the small vocabulary: start/end to VOCAB-2/VOCAB-1 (the end
    token stays the largest id), other ids to 1 + id % (VOCAB - 3), padding 0."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, texts):
        ids = self.tokenizer(texts)
        folded = torch.where(ids > 0, 1 + ids % (VOCAB - 3), ids)
        folded[ids == 49406], folded[ids == 49407] = VOCAB - 2, VOCAB - 1
        return folded


def record_zero_shot(cases: list, io: dict) -> None:
    import open_clip
    from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg
    from open_clip.tokenizer import SimpleTokenizer
    from open_clip.zero_shot_classifier import build_zero_shot_classifier

    vision = CLIPVisionCfg(layers=2, width=32, head_width=16, patch_size=8, image_size=32)
    text = CLIPTextCfg(context_length=CONTEXT, vocab_size=VOCAB, width=64, heads=1, layers=2)
    peer = CLIP(48, vision, text, quick_gelu=True).eval()
    _, manifest = _random_state(peer, 9000, io, "zero_shot")
    x = _normal(9100, (6, 3, 32, 32))
    with torch.no_grad():
        classifier = build_zero_shot_classifier(peer, FoldedTokenizer(SimpleTokenizer()), ZS_NAMES, ZS_TEMPLATES,
                                                num_classes_per_batch=2)
        features = peer.encode_image(x, normalize=True)
        logits = peer.logit_scale.exp() * features @ classifier
    io["zero_shot.x"], io["zero_shot.classifier"], io["zero_shot.logits"] = x, classifier, logits
    cases.append(dict(case="zero_shot", peer="open_clip", peer_version=open_clip.__version__,
                      format="pth", state=manifest, activation="quick_gelu", width=64, heads=1, layers=2,
                      class_names=list(ZS_NAMES), templates=list(ZS_TEMPLATES),
                      image_model="vit_base_patch16_clip_quickgelu_224",
                      image_overrides=dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                                           proj_dim=48, num_classes=len(ZS_NAMES)),
                      peer_call="build_zero_shot_classifier(CLIP(quick_gelu=True), FoldedTokenizer(SimpleTokenizer()), "
                                "names, templates); logit_scale.exp() * encode_image(x, normalize=True) @ classifier"))


if __name__ == "__main__":
    torch.set_num_threads(1)
    (FIXTURES / "clip_tokens.json").write_text(json.dumps(record_tokens(), ensure_ascii=False, indent=0) + "\n")
    cases: list = []
    io: dict = {}
    for record in (record_open_clip, record_hf, record_zero_shot):
        record(cases, io)
    from safetensors.torch import save_file

    save_file({k: v.contiguous().clone() for k, v in io.items()}, str(FIXTURES / "clip_text_io.safetensors"))
    meta = {"command": COMMAND, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "vocab_size": VOCAB, "context_length": CONTEXT, "cases": cases,
            "tensors": sorted(io)}
    (FIXTURES / "clip_text.json").write_text(json.dumps(meta, indent=1) + "\n")
    total = (FIXTURES / "clip_text_io.safetensors").stat().st_size + (FIXTURES / "clip_text.json").stat().st_size
    print(f"wrote {len(cases)} cases, {total / 1e3:.0f} kB; {len(record_tokens()['strings'])} token strings",
          file=sys.stderr)
