"""Seeds and determinism, DomainBed-compatible (`seed_hash` is DomainBed's md5-based hash). numpy and torch are
imported where used, so that `seed_hash` (sweep job grids, the command line) stays light."""
from __future__ import annotations

import hashlib
import random
from typing import cast


def seed_hash(*args) -> int:
    """Derive an integer seed from any printable arguments (DomainBed's `misc.seed_hash`)."""
    args_str = str(args)
    return int(hashlib.md5(args_str.encode("utf-8")).hexdigest(), 16) % (2**31)


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def make_deterministic() -> None:
    """Deterministic kernels where torch offers them (CPU runs are bitwise repeatable)."""
    import torch

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def numpy_rng_state() -> dict:
    """numpy's global generator state as tensors and numbers (storable with `torch.save`, loadable with
    `weights_only=True`). Some algorithms draw from it, as DomainBed's (Mixup's lambda)."""
    import numpy as np
    import torch

    # the default legacy=True returns a tuple (numpy's stubs type the call without `legacy` as a dict)
    state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    kind, keys, pos, has_gauss, cached = state
    return {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def set_numpy_rng_state(state: dict) -> None:
    import numpy as np

    np.random.set_state((state["kind"], state["keys"].numpy().astype(np.uint32), state["pos"], state["has_gauss"],
                         state["cached_gaussian"]))
