"""Array-backed domain datasets: all images of a domain in one uint8 array (memory or memory-mapped).

Every dgmoe dataset that is decoded eagerly, read from the cache or synthesised (MNIST variants) stores a
domain as an `ArrayDomain`. Besides the per-item `Dataset` protocol it offers `gather(indices)`, which the
loaders use to fetch a whole minibatch with one fancy-index instead of B Python calls.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

Items = tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor] | None]


def _as_index_array(indices: Sequence[int] | torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(indices, torch.Tensor):
        return indices.detach().cpu().numpy().astype(np.int64, copy=False)
    return np.asarray(indices, dtype=np.int64)


class ArrayDomain(Dataset):
    """One domain: `images` uint8 `[N, C, H, W]`, `labels` int `[N]`, optional `meta` of `[N, ...]` arrays.

    `images` may be a numpy memmap (the on-disk cache): items are copied out on access, so the file is
    never written and the page cache is shared between DataLoader worker processes.
    """

    def __init__(
        self,
        images: np.ndarray | torch.Tensor,
        labels: np.ndarray | torch.Tensor | Sequence[int],
        meta: Mapping[str, np.ndarray | torch.Tensor] | None = None,
    ):
        images_np = images.numpy() if isinstance(images, torch.Tensor) else images
        if images_np.dtype != np.uint8 or images_np.ndim != 4:
            raise ValueError(f"images must be a uint8 array [N, C, H, W], got {images_np.dtype} {images_np.shape}")
        labels_t = torch.as_tensor(np.asarray(labels), dtype=torch.long)
        if labels_t.shape != (images_np.shape[0],):
            raise ValueError(f"labels must have shape ({images_np.shape[0]},), got {tuple(labels_t.shape)}")
        self.images = images_np
        self.labels = labels_t
        self.meta = None
        if meta is not None:
            self.meta = {k: torch.as_tensor(np.asarray(v)) for k, v in meta.items()}
            for k, v in self.meta.items():
                if v.shape[0] != len(labels_t):
                    raise ValueError(f"meta field {k!r} has {v.shape[0]} rows, expected {len(labels_t)}")

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, index: int):
        x = torch.from_numpy(np.array(self.images[index], copy=True))
        y = int(self.labels[index])
        if self.meta is None:
            return x, y
        return x, y, {k: v[index] for k, v in self.meta.items()}

    def gather(self, indices: Sequence[int] | torch.Tensor | np.ndarray) -> Items:
        """`(x uint8 [B, C, H, W], y long [B], meta or None)` for the given indices, in order."""
        idx = _as_index_array(indices)
        x = torch.from_numpy(np.ascontiguousarray(self.images[idx]))
        y = self.labels[torch.from_numpy(idx)]
        meta = None if self.meta is None else {k: v[torch.from_numpy(idx)] for k, v in self.meta.items()}
        return x, y, meta

    def subset(self, indices: Sequence[int] | np.ndarray) -> "ArrayDomain":
        """A new domain holding only `indices` (copied into memory)."""
        idx = _as_index_array(indices)
        meta = None if self.meta is None else {k: v[torch.from_numpy(idx)] for k, v in self.meta.items()}
        return ArrayDomain(np.ascontiguousarray(self.images[idx]), self.labels[torch.from_numpy(idx)], meta)


def gather_items(env: Dataset, indices: Sequence[int] | torch.Tensor | np.ndarray) -> Items:
    """Fetch and collate `env[i]` for each index: uses `env.gather` when the dataset has one.

    Works with any dataset returning `(x, y)` or `(x, y, meta_dict)`; metadata values are stacked per key.
    """
    gather = getattr(env, "gather", None)
    if gather is not None:
        return gather(indices)
    idx = _as_index_array(indices).tolist()
    items = [env[i] for i in idx]
    x = torch.stack([torch.as_tensor(it[0]) for it in items])
    y = torch.as_tensor([int(it[1]) for it in items], dtype=torch.long)
    meta = None
    if items and len(items[0]) > 2:
        keys = items[0][2].keys()
        meta = {k: torch.stack([torch.as_tensor(it[2][k]) for it in items]) for k in keys}
    return x, y, meta
