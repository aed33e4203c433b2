"""The multi-domain dataset interface every dataset in dgmoe implements.

A `MultiDomainDataset` is a list of per-domain torch datasets (DomainBed's "environments"). Each domain
dataset returns `(image, label)` or `(image, label, meta)` where `image` is a uint8 tensor `[C, H, W]`
(already at the dataset's storage resolution; transforms turn it into a normalised float tensor) and
`meta` a dict of named metadata tensors (e.g. `lat`, `lon`, `location_id`, `region`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar, Mapping, Sequence, Sized, cast

import torch
from torch.utils.data import Dataset

from dgmoe.metrics import GroupEvaluation, ShiftSuite
from dgmoe.sharding import Shard


@dataclass
class Batch:
    """One training-domain minibatch as algorithms receive it. `shard` is set under multi-process
    training: where these samples sit in the minibatch all processes share (see `dgmoe.sharding`)."""

    x: torch.Tensor
    y: torch.Tensor
    meta: dict[str, torch.Tensor] | None = None
    shard: Shard | None = None

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: torch.device | str) -> "Batch":
        # non-blocking: from pinned memory the copies overlap the device's work, from pageable memory they
        # are staged at once; either way the host never waits for the device (no synchronisation)
        meta = None if self.meta is None else {k: v.to(device, non_blocking=True) for k, v in self.meta.items()}
        shard = None if self.shard is None else self.shard.to(device)
        return Batch(self.x.to(device, non_blocking=True), self.y.to(device, non_blocking=True), meta, shard)

    def head(self, n: int) -> "Batch":
        """The first n samples (a whole shard only: cutting one would break the global batch)."""
        if n == len(self):
            return self
        if self.shard is not None:
            raise ValueError("cannot cut a sharded minibatch: under multi-process training every training "
                             "domain's batch must have the same size")
        meta = None if self.meta is None else {k: v[:n] for k, v in self.meta.items()}
        return Batch(self.x[:n], self.y[:n], meta)


@dataclass(frozen=True)
class ClassMap:
    """An evaluation domain labelled in classes of its own, each a group of the training classes: ImageNet-R's
    and ImageNet-A's 200 classes are single ImageNet classes, ObjectNet's 113 classes cover 1 to 5 ImageNet
    classes each. `groups[k]`: the training classes of the domain's class k.

    `project` turns a network's training-class logits into the domain's: the largest logit of each group, as
    the ImageNet-shift evaluations of WiSE-FT (Wortsman et al., CVPR 2022; mlfoundations/wise-ft
    `project_logits`) and Taori et al. (NeurIPS 2020) do; for single-class groups that is the sub-list of the
    logits, so accuracy and cross-entropy are those over the 200 classes alone.
    """

    groups: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.groups or any(not g for g in self.groups):
            raise ValueError("a ClassMap needs at least one class, and every class at least one training class")

    @cached_property
    def _index(self) -> torch.Tensor:
        width = max(len(g) for g in self.groups)  # padded with the group's first class: max is unchanged
        return torch.tensor([list(g) + [g[0]] * (width - len(g)) for g in self.groups], dtype=torch.long)

    @property
    def num_classes(self) -> int:
        return len(self.groups)

    def project(self, logits: torch.Tensor) -> torch.Tensor:
        """`[N, training classes]` -> `[N, len(groups)]`: each group's largest logit."""
        return logits[:, self._index.to(logits.device)].amax(-1)


@dataclass
class MultiDomainDataset:
    """A dataset made of several domains that share one label space.

    `evaluation`: the WILDS-style group metrics recorded for its held-out domains (None: accuracy only);
    `eval_domains`: domains that are evaluation splits only (WILDS' id_val/id_test/val/test), which every
    run must hold out; `class_maps`: evaluation domains labelled in their own classes (domain name ->
    `ClassMap`: ImageNet-R, -A, ObjectNet), evaluated on the projected logits; `source`: where the images were
    read from.
    """

    name: str
    domains: list[str]
    classes: list[str]
    environments: Sequence[Dataset]
    input_shape: tuple[int, int, int]
    n_steps: int = 5001
    checkpoint_freq: int = 300
    metadata_fields: tuple[str, ...] = field(default_factory=tuple)
    evaluation: GroupEvaluation | None = None
    eval_domains: tuple[str, ...] = ()
    source: str = ""  # where the images came from, in words
    version: str = ""  # the published version the folder holds (`dgmoe.data.versions`; "" when not known)
    class_maps: Mapping[str, ClassMap] = field(default_factory=dict)
    shifts: ShiftSuite | None = None  # a distribution-shift suite's ID test domain and shifts

    N_STEPS: ClassVar[int] = 5001

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.environments)

    def sizes(self) -> list[int]:
        """The number of items of each domain."""
        return [len(cast(Sized, env)) for env in self.environments]

    def __getitem__(self, index: int) -> Dataset:
        return self.environments[index]
