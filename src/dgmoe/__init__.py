"""dgmoe: domain generalization with sparse mixture-of-experts vision transformers.

`create_model`, `list_models` and `count_parameters` are loaded on first use, so that importing a light
part of dgmoe (errors, run-folder locks, the sweep state) does not import torch.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.3.0"
__all__ = ["count_parameters", "create_model", "list_models", "__version__"]


def __dir__() -> list[str]:
    """What `dir(dgmoe)` and IPython's completion list: the public names, loaded or not."""
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    if name in ("count_parameters", "create_model", "list_models"):
        import dgmoe.models

        return getattr(dgmoe.models, name)
    raise AttributeError(f"module 'dgmoe' has no attribute {name!r}")
