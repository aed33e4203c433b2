"""Accuracy and loss of an algorithm on every domain's in/out split (DomainBed's `misc.accuracy`)."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.loaders import eval_loader


@torch.no_grad()
def split_metrics(predict: Callable, dataset, indices, transform, device: str, batch_size: int = 64,
                  num_workers: int = 0) -> tuple[float, float]:
    correct, total, loss_sum = 0, 0, 0.0
    for batch in eval_loader(dataset, indices, transform, batch_size, num_workers):
        batch = batch.to(device)
        logits = predict(batch.x, batch.meta).float()
        loss_sum += F.cross_entropy(logits, batch.y, reduction="sum").item()
        correct += (logits.argmax(1) == batch.y).sum().item()
        total += len(batch.y)
    if total == 0:
        return float("nan"), float("nan")
    return correct / total, loss_sum / total


def evaluate_domains(algorithm, dataset: MultiDomainDataset, splits: Sequence[tuple[np.ndarray, np.ndarray]],
                     transform, device: str, batch_size: int = 64, num_workers: int = 0) -> dict[str, float]:
    """`env{i}_{in,out}_{acc,loss}` for every domain i, in eval mode; restores train mode after."""
    was_training = algorithm.training
    algorithm.eval()
    results: dict[str, float] = {}
    try:
        for i, (in_idx, out_idx) in enumerate(splits):
            for name, idx in (("in", in_idx), ("out", out_idx)):
                acc, loss = split_metrics(algorithm.predict, dataset[i], idx, transform, device, batch_size,
                                          num_workers)
                results[f"env{i}_{name}_acc"] = acc
                results[f"env{i}_{name}_loss"] = loss
    finally:
        algorithm.train(was_training)
    return results
