"""The pretrained checkpoints the recipes and README name, declared as data, and `get` (`dgmoe weights get`).

Each `Weights` is a file of a Hugging Face Hub model repo (timm's re-publications of DeiT, the CLIP towers and
DINOv2) at a `revision`, with its sha256 where known and its licence, and the `--model` names it fits. `get`
fetches it with `huggingface_hub` (the 'hub' extra; `HF_ENDPOINT` is honoured), checks the sha256, and writes
`<DIR>/<name>.safetensors` with `<DIR>/<name>.json` beside it (source, revision, sha256), both atomically; the
`--pretrained` argument to pass is `<DIR>/<name>.safetensors`.

The revisions are the branch "main": no commit of these repos was read from this project's machines, so none is
pinned; `dgmoe weights get --list` says so, and the `.json` records the sha256 of the bytes received, so two
machines can compare them.
"""
from __future__ import annotations

import datetime
import difflib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dgmoe.atomic import atomic_path, write_json_atomic
from dgmoe.errors import DataMismatchError, UsageError

UNPINNED = "main"


@dataclass(frozen=True)
class Weights:
    """One checkpoint: `repo_id`/`filename` at `revision` on the Hub, its `sha256` (None: not known here),
    `licence`, and the dgmoe `models` it fits."""

    name: str
    repo_id: str
    filename: str
    models: tuple[str, ...]
    licence: str
    revision: str = UNPINNED
    sha256: str | None = None

    @property
    def pinned(self) -> bool:
        return self.revision != UNPINNED


_DEIT = "Apache-2.0 (DeiT, Touvron et al., ICML 2021)"
_CLIP = "MIT (OpenAI CLIP)"
_DINO = "Apache-2.0 (DINOv2, Oquab et al., 2023)"

WEIGHTS: tuple[Weights, ...] = (
    Weights("deit_tiny_patch16_224", "timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors",
            ("deit_tiny_patch16_224", "vit_tiny_patch16_224", "gmoe_tiny_patch16_224", "moge_tiny_patch16_224"),
            _DEIT),
    Weights("deit_small_patch16_224", "timm/deit_small_patch16_224.fb_in1k", "model.safetensors",
            ("deit_small_patch16_224", "vit_small_patch16_224", "gmoe_small_patch16_224", "sfmoe_small_patch16_224",
             "moge_small_patch16_224"), _DEIT),
    Weights("deit_base_patch16_224", "timm/deit_base_patch16_224.fb_in1k", "model.safetensors",
            ("deit_base_patch16_224", "vit_base_patch16_224", "gmoe_base_patch16_224"), _DEIT),
    Weights("vit_base_patch16_clip_224.openai", "timm/vit_base_patch16_clip_224.openai",
            "open_clip_model.safetensors", ("vit_base_patch16_clip_quickgelu_224",
                                            "gmoe_base_patch16_clip_quickgelu_224",
                                            "sfmoe_base_patch16_clip_quickgelu_224"), _CLIP),
    Weights("vit_large_patch14_clip_224.openai", "timm/vit_large_patch14_clip_224.openai",
            "open_clip_model.safetensors", ("vit_large_patch14_clip_quickgelu_224",
                                            "gmoe_large_patch14_clip_quickgelu_224"), _CLIP),
    Weights("vit_small_patch14_dinov2.lvd142m", "timm/vit_small_patch14_dinov2.lvd142m", "model.safetensors",
            ("vit_small_patch14_dinov2", "gmoe_small_patch14_dinov2", "sfmoe_small_patch14_dinov2"), _DINO),
    Weights("vit_base_patch14_dinov2.lvd142m", "timm/vit_base_patch14_dinov2.lvd142m", "model.safetensors",
            ("vit_base_patch14_dinov2", "gmoe_base_patch14_dinov2", "sfmoe_base_patch14_dinov2"), _DINO),
    Weights("vit_small_patch14_reg4_dinov2.lvd142m", "timm/vit_small_patch14_reg4_dinov2.lvd142m",
            "model.safetensors", ("vit_small_patch14_reg4_dinov2", "gmoe_small_patch14_reg4_dinov2"), _DINO),
)


def find(name: str) -> Weights:
    """The `Weights` named `name` (or the one fitting the model `name`), else the closest name."""
    for w in WEIGHTS:
        if name == w.name or name == w.repo_id:
            return w
    fitting = [w for w in WEIGHTS if name in w.models]
    if len(fitting) == 1:
        return fitting[0]
    close = difflib.get_close_matches(name, [w.name for w in WEIGHTS], n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"NAME {name!r} is no checkpoint dgmoe knows{hint} (see `dgmoe weights get --list`)")


@dataclass(frozen=True)
class Got:
    """Where `get` wrote the checkpoint and its record."""

    path: Path
    record_path: Path
    sha256: str


def get(name: str, to: str | Path, progress: bool = True) -> Got:
    """Fetch checkpoint `name` into the folder `to` as `<name>.safetensors` + `<name>.json` (see the module)."""
    from dgmoe import __version__
    from dgmoe.data.fetch import sha256_file
    from dgmoe.data.fetch_hubs import download_hub

    w = find(name)
    if not w.filename.endswith(".safetensors"):
        raise UsageError(f"{w.name}: {w.filename} is not a .safetensors file")  # every declared one is
    folder = Path(to).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    path, record_path = folder / f"{w.name}.safetensors", folder / f"{w.name}.json"
    partial = folder / f".{w.name}.download"
    download_hub(w.repo_id, w.filename, w.revision, partial, repo_type="model", sha256=w.sha256)
    sha = sha256_file(partial)
    if w.sha256 is not None and sha != w.sha256:
        raise DataMismatchError(f"{w.repo_id}/{w.filename}: sha256 {sha}, expected {w.sha256} (kept at {partial})")
    with open(partial, "rb") as f:
        head = f.read(8)
    if len(head) < 8 or int.from_bytes(head, "little") > os.path.getsize(partial):
        raise DataMismatchError(f"{w.repo_id}/{w.filename}: not a safetensors file (kept at {partial})")
    with atomic_path(path) as tmp:
        shutil.copyfile(partial, tmp)
    write_json_atomic(record_path, {
        "name": w.name, "source": f"hf-hub:{w.repo_id}", "filename": w.filename, "revision": w.revision,
        "pinned": w.pinned, "sha256": sha, "licence": w.licence, "models": list(w.models),
        "endpoint": os.environ.get("HF_ENDPOINT", "https://huggingface.co"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "dgmoe_version": __version__})
    partial.unlink()
    return Got(path, record_path, sha)
