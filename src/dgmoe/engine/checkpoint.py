"""Run artefacts: weights as safetensors, the resume state, and loading a finished run back.

A run folder holds `config.json` (the RunConfig plus resolved hparams and dataset facts),
`results.jsonl` (DomainBed records), `model.safetensors` (last), `best.safetensors` (best
training-domain validation accuracy; a parameter-efficient run's hold its trainable weights and name their
base weights), `resume.pt` (everything needed to continue: weights, optimiser
and algorithm state, RNG state, the records so far; tensors and plain types only, loaded with
`weights_only=True`) and `done` once finished. Every file is written atomically.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn as nn
from safetensors.torch import load_file

from dgmoe.engine.build import run_build
from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import atomic_path, save_safetensors_atomic
from dgmoe.errors import UsageError
from dgmoe.models.peft import base_of, file_sha256, peft_of, trainable_names, trainable_state_dict

#: safetensors metadata of a parameter-efficient run's weights file: "trainable" when it holds the trainable
#: weights only (the rest are the base weights it names: base_model, base_pretrained, base_sha256)
PEFT_WEIGHTS = "peft_weights"


def save_weights(module: nn.Module, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Save a network's weights; a parameter-efficient network built from a pretrained file keeps only its
    trainable weights and names the base weights they need (a PEFT network from a random initialisation
    keeps every weight: its base has no file to name). Its PEFT settings are the run's (config.json's `peft`)."""
    state, metadata = module.state_dict(), dict(metadata or {})
    config, base = peft_of(module), base_of(module)
    if config is not None and config.active and isinstance(base, dict) and base.get("base_pretrained"):
        state = trainable_state_dict(module)
        metadata.update({**base, PEFT_WEIGHTS: "trainable"})
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    save_safetensors_atomic(path, state, metadata=metadata or None)


def save_resume_state(path: str | Path, state: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_resume_state(path: str | Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise RuntimeError(f"cannot read resume state {path}: {exc}; delete it to restart the run") from exc


def read_run_config(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise UsageError(f"{run_dir} is not a dgmoe run folder (no config.json)")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path} is corrupt ({e}); restore it or start the run in another --output-dir") from None
    if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
        raise UsageError(f"{path} is not a dgmoe run config (no 'config' object)")
    return config


def saved_run(config: dict[str, Any]) -> RunConfig:
    """The `RunConfig` a run's config.json holds (either layout; settings this dgmoe no longer knows dropped)."""
    return RunConfig.from_dict(config["config"], strict=False)


def find_base_weights(recorded: Path, digest: str, near: Sequence[Path] = ()) -> Path | None:
    """The base weights a PEFT run names: the recorded path when it is there, else a file with the same name,
    and then any file with the same suffix, whose sha256 is `digest`, in the recorded folder, the folders
    `near` (the run folder and its parents) or the working directory; None when none is found."""
    from dgmoe.models.peft import file_sha256

    if recorded.is_file():
        return recorded
    folders = [f for f in dict.fromkeys([recorded.parent, *near, Path.cwd()]) if f.is_dir()]
    same_name = [f / recorded.name for f in folders]
    same_kind = [c for f in folders for c in sorted(f.glob(f"*{recorded.suffix}")) if recorded.suffix]
    for candidate in dict.fromkeys([*same_name, *same_kind]):
        if candidate.is_file() and file_sha256(candidate) == digest:
            return candidate
    return None


def build_network(run_config: dict[str, Any], base: dict[str, str] | None = None,
                  run_dir: Path | None = None) -> nn.Module:
    """Rebuild a run's network (untrained) from its config.json; with `base` (a PEFT weights file's metadata),
    from the base weights it names (found by `find_base_weights` near `run_dir` when moved), checked against
    their sha256, for the trainable weights to follow. The network is the run's `model_build`
    (`dgmoe.engine.build.run_build`), also for folders written by older dgmoe versions."""
    build = run_build(run_config)  # without its pretrained weights: the run's own weights follow
    if base is not None:
        recorded, digest = Path(base.get("base_pretrained", "")), base.get("base_sha256", "")
        near = [run_dir, *run_dir.resolve().parents][:4] if run_dir is not None else []
        found = find_base_weights(recorded, digest, near)
        if found is None:
            raise UsageError(f"the run's weights hold its trainable (PEFT) weights only and need the base weights "
                             f"{recorded} (sha256 {digest}), which is not a file and is not beside it, the run or "
                             "the working directory under any name; put it back at that path")
        path = found
        if path == recorded and file_sha256(path) != digest:  # (a file found elsewhere was found by its sha256)
            raise UsageError(f"the base weights {path} are not those the run was trained from (sha256 {digest}); "
                             "restore that file")
        build = build.with_weights(str(path), saved_run(run_config).model.pretrained_antialias)
    return build.create()


def peft_metadata(path: str | Path) -> dict[str, str] | None:
    """The metadata of a weights file that holds a PEFT run's trainable weights only, else None."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
    return meta if meta.get(PEFT_WEIGHTS) == "trainable" else None


def load_weights(network: nn.Module, path: str | Path, partial: bool = False) -> None:
    """Load a weights file strictly; `partial` (a PEFT file): exactly the network's trainable weights."""
    state = load_file(str(path))
    if not partial:
        network.load_state_dict(state, strict=True)
        return
    expected = set(trainable_names(network))
    if set(state) != expected:
        odd = sorted(set(state) ^ expected)
        raise UsageError(f"{path} does not hold this network's trainable weights: {odd[0]}"
                         + (f" and {len(odd) - 1} more" if len(odd) > 1 else ""))
    network.load_state_dict(state, strict=False)


def load_state(network: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a run's weights into a network built as the run's (`prepare_run`: a PEFT network already holds its
    base weights): every weight strictly, or exactly its trainable weights (a PEFT run's weights files)."""
    trainable = set(trainable_names(network))
    partial = peft_of(network) is not None and set(state) == trainable and trainable != set(network.state_dict())
    network.load_state_dict(state, strict=not partial)


WEIGHT_FILES = {"best": "best.safetensors", "last": "model.safetensors"}


def weights_file(run_dir: str | Path, which: str = "best") -> tuple[Path, str]:
    """`(path, which)` of the weights `load_run` loads: `best`, or `last` when a run kept no best file."""
    run_dir = Path(run_dir)
    if which not in WEIGHT_FILES:
        raise ValueError(f"which must be 'best' or 'last', got {which!r}")
    path = run_dir / WEIGHT_FILES[which]
    if not path.is_file() and which == "best":
        path, which = run_dir / WEIGHT_FILES["last"], "last"
    if not path.is_file():
        if _soup_method(run_dir) == "ensemble":  # `dgmoe soup`: its config.json names what the folder holds
            raise UsageError(f"{run_dir} is an output ensemble of `dgmoe soup` (a mean of its members' logits): it "
                             "has no weights of its own; analyse one of its members, or its uniform soup")
        raise FileNotFoundError(f"{run_dir} has no weights yet ({WEIGHT_FILES[which]} missing)")
    return path, which


def _soup_method(run_dir: Path) -> str | None:
    try:
        soup = read_run_config(run_dir).get("soup")
    except UsageError:
        return None
    return soup.get("method") if isinstance(soup, dict) else None


def checkpoint_step(path: str | Path) -> int | None:
    """The training step a weights file was saved at (its safetensors metadata), or None if unrecorded."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            step = (f.metadata() or {}).get("step")
    except (OSError, ValueError, RuntimeError):
        return None
    return int(step) if step is not None and str(step).lstrip("-").isdigit() else None


def load_run(run_dir: str | Path, which: str = "best", device: str = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Return `(network, run_config)` of a run, with its `best` or `last` weights, in eval mode."""
    config = read_run_config(run_dir)
    path, _ = weights_file(run_dir, which)
    base = peft_metadata(path)
    network = build_network(config, base, Path(run_dir))
    load_weights(network, path, partial=base is not None)
    return network.to(device).eval(), config
