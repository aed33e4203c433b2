"""DomainBed's Debug28 / Debug224: three environments of 16 random images and 2 classes, for smoke tests."""
from __future__ import annotations

import torch

from dgmoe.data.arrays import ArrayDomain
from dgmoe.seeding import seed_hash

DEBUG_ENVIRONMENTS = ("0", "1", "2")
DEBUG_PER_ENV = 16


def debug_environments(size: int, n_per_domain: int | None = None, seed: int = 0) -> list[ArrayDomain]:
    n = DEBUG_PER_ENV if n_per_domain is None else n_per_domain
    envs = []
    for i in range(len(DEBUG_ENVIRONMENTS)):
        g = torch.Generator().manual_seed(seed_hash("Debug", size, seed, i))
        images = torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)
        envs.append(ArrayDomain(images, torch.randint(0, 2, (n,), generator=g)))
    return envs
