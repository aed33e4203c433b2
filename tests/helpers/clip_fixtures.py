"""The recorded CLIP text fixtures' weight files, regenerated (tests/parity/record_clip_text.py stores no weight
file: each case's manifest names the peer's keys, shapes and numpy seeds)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

FIXTURES = Path(__file__).resolve().parents[1] / "parity" / "fixtures"
META = json.loads((FIXTURES / "clip_text.json").read_text())
CASES = {case["case"]: case for case in META["cases"]}


def clip_fixture_file(name: str, folder: Path, io: dict[str, torch.Tensor] | None = None) -> Path:
    """The peer's state dict of the recorded case `name`, written in the peer's own file format under `folder`."""
    case = CASES[name]
    io = io if io is not None else load_file(str(FIXTURES / "clip_text_io.safetensors"))
    state = {key: torch.from_numpy(np.asarray(np.random.RandomState(seed).standard_normal(tuple(shape)) * scale
                                              + offset, dtype=np.float32).reshape(tuple(shape)))
             for key, shape, seed, scale, offset in case["state"]}
    prefix = f"{name}.state."
    state.update({k[len(prefix):]: v for k, v in io.items() if k.startswith(prefix)})
    path = Path(folder) / f"{name}.{case['format']}"
    if case["format"] == "safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    return path
