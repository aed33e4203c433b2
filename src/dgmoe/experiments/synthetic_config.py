"""The parameters of the GMoE App. B.2 synthetic experiment (`dgmoe.experiments.synthetic`), apart from the
experiment so that a recipe or the command line can read them without importing torch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SyntheticConfig:
    """App. B.2's parameters (P=10, K=4, 100k train, 2k val and 2k per test set) and our training choices."""

    n_patches: int = 10
    n_classes: int = 4
    n_train: int = 100_000
    n_val: int = 2_000
    n_test: int = 2_000
    mlp_hidden: tuple[int, ...] = (100, 100)
    fcn_filters: int = 20
    fcn_pool: Literal["max", "mean"] = "max"
    epochs: int = 20
    batch_size: int = 256
    lr: float = 3e-3
    p1: float = 1.0
    p2: float = 1.0

    def __post_init__(self) -> None:
        if self.n_patches < 2 or self.n_classes < 2:
            raise ValueError(f"need n_patches >= 2 and n_classes >= 2, got {self.n_patches}, {self.n_classes}")
        for name in ("p1", "p2"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p}")
        if self.fcn_pool not in ("max", "mean"):
            raise ValueError(f"fcn_pool must be 'max' or 'mean', got {self.fcn_pool!r}")
