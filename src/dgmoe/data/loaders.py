"""Deterministic, resumable minibatches (DomainBed's InfiniteDataLoader semantics) and ordered eval batches.

Each training step draws `batch_size` items *with replacement* from every training domain (uniformly, or
with per-item weights such as DomainBed's class-balanced ones) and augments them. Both the draw and the
augmentation use one `torch.Generator` seeded by `seed_hash(seed, step, domain_id)`, so the batches of
step s are a pure function of `(seed, s, domain)`: a run resumed at step s sees exactly the batches an
uninterrupted run would, whatever the number of loader workers.
"""
from __future__ import annotations

import itertools
from typing import Callable, Iterator, Protocol, Sequence, Sized, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from dgmoe.data.arrays import gather_items
from dgmoe.data.base import Batch
from dgmoe.data.prefetch import BackgroundBatches
from dgmoe.data.transforms import AugmentDraws, TrainTransform
from dgmoe.seeding import seed_hash

Transform = Callable[..., torch.Tensor]


def class_balanced_weights(labels: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """DomainBed's `make_weights_for_balanced_classes`: weight 1 / (n_classes_present * count(class))."""
    y = torch.as_tensor(labels, dtype=torch.long)
    counts = torch.bincount(y)
    n_present = int((counts > 0).sum())
    return 1.0 / (n_present * counts[y].double())


class BatchStream(Protocol):
    """What `TrainBatches.iter_from` returns: the steps' batches, and `close()` to stop early."""

    def __iter__(self) -> Iterator[list[Batch]]: ...

    def __next__(self) -> list[Batch]: ...

    def close(self) -> None: ...


def _identity(x):
    return x


def _pinned(b: Batch) -> Batch:
    # DataLoader's own pinning passes unknown classes such as Batch through untouched
    meta = None if b.meta is None else {k: v.pin_memory() for k, v in b.meta.items()}
    return Batch(b.x.pin_memory(), b.y.pin_memory(), meta)


def _staged(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`x` in pinned memory when it is bound for a GPU: a copy from pageable memory is staged by the driver,
    which may wait for the device's queue to drain (a host synchronisation in all but name); from pinned
    memory it is queued and the host goes on."""
    return x.pin_memory() if device.type == "cuda" and not x.is_pinned() else x


def _single_thread(_: int) -> None:
    torch.set_num_threads(1)


class _Steps(Sampler[int]):
    def __init__(self, start: int, stop: int | None):
        self.start, self.stop = start, stop

    def __iter__(self) -> Iterator[int]:
        return iter(itertools.count(self.start) if self.stop is None else range(self.start, self.stop))


class _StepDataset(Dataset):
    def __init__(self, batches: "TrainBatches"):
        self.batches = batches

    def __getitem__(self, step: int):
        if self.batches.device is None:
            return self.batches.batch_at(step)
        return [(x, y, meta, g.get_state()) for x, y, meta, g in self.batches.draw(step)]


class TrainBatches:
    """One `Batch` per training domain for any step, as a pure function of `(seed, step, domain)`.

    `transform` (one for all domains or one per domain) gets the uint8 batch and the step's generator.
    `device`: where to augment (e.g. "cuda"); items are gathered on the CPU and moved as uint8, so the
    batches equal the CPU ones up to floating-point differences of the device's kernels.
    """

    def __init__(
        self,
        environments: Sequence[Dataset],
        indices: Sequence[Sequence[int] | np.ndarray | torch.Tensor],
        batch_size: int,
        seed: int,
        transform: Transform | Sequence[Transform | None] | None = None,
        weights: Sequence[torch.Tensor | None] | None = None,
        domain_ids: Sequence[int] | None = None,
        device: torch.device | str | None = None,
    ):
        if len(environments) != len(indices):
            raise ValueError(f"got {len(environments)} environments but {len(indices)} index lists")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.environments = list(environments)
        self.indices = [torch.as_tensor(np.asarray(i), dtype=torch.long) for i in indices]
        for d, idx in enumerate(self.indices):
            if len(idx) == 0:
                raise ValueError(f"training domain {d} has no items to draw from")
        self.batch_size = batch_size
        self.seed = seed
        self.device = None if device is None else torch.device(device)
        n = len(self.environments)
        self.transforms: list[Transform | None]
        if isinstance(transform, (list, tuple)):
            self.transforms = list(transform)
        else:  # one transform (or None) for every domain
            self.transforms = [cast("Transform | None", transform)] * n
        self.weights = [None] * n if weights is None else [None if w is None else torch.as_tensor(w, dtype=torch.double)
                                                           for w in weights]
        for d, w in enumerate(self.weights):
            if w is not None and w.shape != self.indices[d].shape:
                raise ValueError(f"weights for domain {d} have shape {tuple(w.shape)}, expected "
                                 f"{tuple(self.indices[d].shape)} (one per index)")
        self.domain_ids = list(range(n)) if domain_ids is None else list(domain_ids)
        if len(self.transforms) != n or len(self.weights) != n or len(self.domain_ids) != n:
            raise ValueError(f"transform, weights and domain_ids must each have one entry per domain ({n})")

    def generator(self, step: int, domain: int) -> torch.Generator:
        return torch.Generator().manual_seed(seed_hash(self.seed, step, self.domain_ids[domain]))

    def draw(self, step: int) -> list[tuple[torch.Tensor, torch.Tensor, dict | None, torch.Generator]]:
        """The raw uint8 items of step `step` per domain, with the generator to augment them."""
        out = []
        for d, env in enumerate(self.environments):
            g = self.generator(step, d)
            weights = self.weights[d]
            if weights is None:
                pos = torch.randint(len(self.indices[d]), (self.batch_size,), generator=g)
            else:
                pos = torch.multinomial(weights, self.batch_size, replacement=True, generator=g)
            out.append((*gather_items(env, self.indices[d][pos]), g))
        return out

    def _moved(self, x: torch.Tensor, y: torch.Tensor, meta) -> tuple[torch.Tensor, torch.Tensor, dict | None]:
        """A domain's raw items on `device` (without waiting for it), or as they are without one."""
        if self.device is None:
            return x, y, meta
        x, y = _staged(x, self.device).to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        meta = None if meta is None else {k: v.to(self.device, non_blocking=True) for k, v in meta.items()}
        return x, y, meta

    def _augment(self, d: int, x: torch.Tensor, y: torch.Tensor, meta, g: torch.Generator) -> Batch:
        x, y, meta = self._moved(x, y, meta)
        transform = self.transforms[d]
        if transform is not None:
            x = transform(x, generator=g)
        return Batch(x, y, meta)

    def _augment_all(self, raw: list) -> list[Batch]:
        """The step's batches from its raw `(x, y, meta, generator)` per domain. When every domain has the same
        `TrainTransform` and image shape, the decisions are drawn per domain (from its generator, as alone)
        and carried out in one pass over all domains' images: a third of the kernel launches on a GPU."""
        tf = self.transforms[0]
        if len(raw) < 2 or not isinstance(tf, TrainTransform) or any(t is not tf for t in self.transforms) \
                or len({tuple(x.shape[1:]) for x, *_ in raw}) > 1:
            return [self._augment(d, *item) for d, item in enumerate(raw)]
        draws = AugmentDraws.concat([tf.draw(x.shape[0], x.shape[1], g) for x, _, _, g in raw])
        moved = [self._moved(x, y, meta) for x, y, meta, _ in raw]
        images = tf.apply(torch.cat([x for x, _, _ in moved]), draws).split([len(x) for x, _, _ in moved])
        return [Batch(x, y, meta) for x, (_, y, meta) in zip(images, moved)]

    def batch_at(self, step: int) -> list[Batch]:
        return self._augment_all(self.draw(step))

    def _from_worker(self, raw) -> list[Batch]:
        items = []
        for x, y, meta, state in raw:
            g = torch.Generator()
            g.set_state(state)
            items.append((x, y, meta, g))
        return self._augment_all(items)

    def iter_from(self, start_step: int = 0, stop_step: int | None = None, num_workers: int = 0,
                  pin_memory: bool = False, prefetch_factor: int = 2,
                  background: bool | None = None) -> BatchStream:
        """Batches of steps `start_step, start_step + 1, ...` (up to `stop_step`, exclusive, or forever).

        With `num_workers > 0` a torch DataLoader builds steps ahead in worker processes (one torch thread
        each): complete batches, or with `device` set the raw uint8 items, augmented here on the device.
        `background` (default: when `device` is a GPU): the copies to the device and the augmentation run
        `prefetch_factor` steps ahead in a thread, on a side stream (`dgmoe.data.prefetch`).
        The batches are identical to `batch_at`'s. Call `close()` on the iterator when stopping early.
        """
        if background is None:
            background = self.device is not None and self.device.type == "cuda"
        if num_workers <= 0:
            steps = itertools.count(start_step) if stop_step is None else range(start_step, stop_step)
            source: BatchStream = (self.batch_at(s) for s in steps)
        else:
            loader = DataLoader(_StepDataset(self), batch_size=None, sampler=_Steps(start_step, stop_step),
                                num_workers=num_workers, collate_fn=_identity, prefetch_factor=prefetch_factor,
                                worker_init_fn=_single_thread, pin_memory=pin_memory and self.device is not None)
            if self.device is not None:
                source = (self._from_worker(raw) for raw in loader)
            elif not pin_memory:
                source = (batches for batches in loader)
            else:
                source = ([_pinned(b) for b in batches] for batches in loader)
        if not background:
            return source
        return BackgroundBatches(source, self.device, depth=prefetch_factor)


def eval_loader(dataset: Dataset, indices: Sequence[int] | np.ndarray | torch.Tensor | None,
                transform: Transform | None, batch_size: int = 64, num_workers: int = 0) -> Iterator[Batch]:
    """`Batch`es over `indices` (all items when None) in order, `batch_size` at a time (DomainBed uses 64)."""
    if indices is None:
        indices = torch.arange(len(cast(Sized, dataset)))  # torch's Dataset declares no __len__
    chunks = _Parts([(dataset, torch.as_tensor(np.asarray(indices), dtype=torch.long))], transform, batch_size)
    items = (chunks[k] for k in range(len(chunks))) if num_workers <= 0 else iter(
        DataLoader(chunks, batch_size=None, shuffle=False, num_workers=num_workers, collate_fn=_identity,
                   worker_init_fn=_single_thread))
    return (Batch(x, y, meta) for _, x, y, meta in items)


class _Parts(Dataset):
    """Every `batch_size` chunk of several (dataset, indices) parts, in order: item k is (part, x, y, meta)."""

    def __init__(self, parts: Sequence[tuple[Dataset, torch.Tensor]], transform, batch_size: int):
        self.parts, self.transform, self.batch_size = list(parts), transform, batch_size
        self.chunks = [(p, start) for p, (_, idx) in enumerate(self.parts) for start in range(0, len(idx), batch_size)]

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, k: int):
        part, start = self.chunks[k]
        env, idx = self.parts[part]
        x, y, meta = gather_items(env, idx[start:start + self.batch_size])
        if self.transform is not None:
            x = self.transform(x, generator=None)
        return part, x, y, meta


class EvalBatches:
    """Ordered evaluation batches over many (dataset, indices) parts in one pass, tagged with their part.

    With workers, one DataLoader per distinct set of parts is kept with persistent workers, so the
    evaluation at every checkpoint reuses the worker processes started at the first one (starting them
    cost ~2.5 s per evaluation on a 16-core GPU host); `pin_memory` pins batches for asynchronous copies to a
    GPU. Without workers, batches are built in this process as `eval_loader` does.
    `device` (e.g. "cuda"): the transform runs there, as `TrainBatches(device=...)` does: the uint8 images
    travel (a quarter of the float bytes) and are resized and normalised on the device."""

    def __init__(self, transform: Transform | None, batch_size: int = 64, num_workers: int = 0,
                 pin_memory: bool = False, device: torch.device | str | None = None):
        self.transform, self.batch_size = transform, batch_size
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.device = None if device is None else torch.device(device)
        self._loaders: dict[tuple, DataLoader] = {}

    def __call__(self, parts: Sequence[tuple[Dataset, Sequence[int] | np.ndarray | torch.Tensor]]
                 ) -> Iterator[tuple[int, Batch]]:
        tensors = [(env, torch.as_tensor(np.asarray(idx), dtype=torch.long)) for env, idx in parts]
        dataset = _Parts(tensors, None if self.device is not None else self.transform, self.batch_size)
        items: Iterator[tuple]
        if self.num_workers <= 0:
            items = (dataset[k] for k in range(len(dataset)))
        else:
            key = tuple((id(env), len(idx), hash(idx.numpy().tobytes())) for env, idx in tensors)
            if key not in self._loaders:
                self._loaders[key] = DataLoader(dataset, batch_size=None, shuffle=False, num_workers=self.num_workers,
                                                collate_fn=_identity, worker_init_fn=_single_thread,
                                                persistent_workers=True, pin_memory=self.pin_memory)
            items = iter(self._loaders[key])
        if self.device is None:
            return ((part, Batch(x, y, meta)) for part, x, y, meta in items)
        return ((part, self._on_device(x, y, meta)) for part, x, y, meta in items)

    def _on_device(self, x: torch.Tensor, y: torch.Tensor, meta) -> Batch:
        assert self.device is not None
        batch = Batch(_staged(x, self.device), y, meta).to(self.device)
        return batch if self.transform is None else Batch(self.transform(batch.x), batch.y, batch.meta)
