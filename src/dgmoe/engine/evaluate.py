"""Accuracy and loss of an algorithm on every domain's in/out split (DomainBed's `misc.accuracy`), and the
WILDS metrics of the held-out domains of datasets that declare a group evaluation.

For such a dataset (`MultiDomainDataset.evaluation`, e.g. FMoW's regions) every held-out domain i also
gets the metrics of `GroupEvaluation.record` over its whole split, in and out parts together, under
`env{i}_acc_avg`, `env{i}_acc_worst_group`, `env{i}_f1_macro`, ... (Koh et al., WILDS, ICML 2021), and
the record names the group field, `wilds_groups` (e.g. 'region'), and the validation domain of
worst-group selection, `wilds_val_env`, when it is held out.
These come from the predictions the accuracies are computed from: no extra forward pass.

`sampled_splits` gives the fixed, seeded per-split samples a run with `--eval-sample N` evaluates at its
intermediate checkpoints (the same images at every checkpoint, so that they compare; every image at the last).
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.loaders import eval_loader
from dgmoe.seeding import seed_hash

#: record keys: the validation domain's index (`dgmoe.selection.WorstGroupSelection`), the group field
VAL_ENV_KEY, GROUPS_KEY = "wilds_val_env", "wilds_groups"


@torch.no_grad()
def _predict(predict: Callable, dataset, indices, transform, device: str, batch_size: int, num_workers: int,
             group_field: str | None) -> tuple[float, float, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """(accuracy, mean loss, [(y, predicted class, group) per batch] when `group_field` is given)."""
    correct, total, loss_sum, kept = 0, 0, 0.0, []
    for batch in eval_loader(dataset, indices, transform, batch_size, num_workers):
        batch = batch.to(device)
        logits = predict(batch.x, batch.meta).float()
        loss_sum += F.cross_entropy(logits, batch.y, reduction="sum").item()
        pred = logits.argmax(1)
        correct += (pred == batch.y).sum().item()
        total += len(batch.y)
        if group_field is not None and batch.meta is not None:
            kept.append((batch.y.cpu(), pred.cpu(), batch.meta[group_field].reshape(-1).cpu()))
    if total == 0:
        return float("nan"), float("nan"), kept
    return correct / total, loss_sum / total, kept


def sampled_splits(splits: Sequence[tuple[np.ndarray, np.ndarray]], uda: Mapping[int, np.ndarray], n: int,
                   seed: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict[int, np.ndarray]]:
    """(splits, uda) with every split cut to a fixed sample of at most `n` of its indices, drawn with a
    seed derived from `seed`, the domain and the split (sorted, so that evaluation reads in index order)."""
    def cut(idx: np.ndarray, *key: object) -> np.ndarray:
        idx = np.asarray(idx)
        if len(idx) <= n:
            return idx
        return np.sort(np.random.RandomState(seed_hash(seed, "eval_sample", *key)).choice(idx, n, replace=False))

    return ([(cut(a, i, "in"), cut(b, i, "out")) for i, (a, b) in enumerate(splits)],
            {i: cut(idx, i, "uda") for i, idx in uda.items()})


def split_metrics(predict: Callable, dataset, indices, transform, device: str, batch_size: int = 64,
                  num_workers: int = 0) -> tuple[float, float]:
    acc, loss, _ = _predict(predict, dataset, indices, transform, device, batch_size, num_workers, None)
    return acc, loss


def evaluate_domains(algorithm, dataset: MultiDomainDataset, splits: Sequence[tuple[np.ndarray, np.ndarray]],
                     transform, device: str, batch_size: int = 64, num_workers: int = 0,
                     test_envs: Sequence[int] = (), uda: Mapping[int, np.ndarray] | None = None
                     ) -> dict[str, float | int | str]:
    """`env{i}_{in,out}_{acc,loss}` for every domain i, in eval mode, plus the WILDS metrics of the held-out
    domains `test_envs` when the dataset declares a group evaluation; restores train mode after.

    `uda` (test domain -> its unlabeled split, `dgmoe.data.uda_splits`) adds `env{k}_uda_{acc,loss}` where k
    counts the uda splits in domain order, as DomainBed names them (its k is not the domain's index)."""
    evaluation = dataset.evaluation
    was_training = algorithm.training
    algorithm.eval()
    results: dict[str, float | int | str] = {}
    try:
        for i, (in_idx, out_idx) in enumerate(splits):
            field = evaluation.field if evaluation is not None and i in test_envs else None
            kept = []
            for name, idx in (("in", in_idx), ("out", out_idx)):
                acc, loss, part = _predict(algorithm.predict, dataset[i], idx, transform, device, batch_size,
                                           num_workers, field)
                results[f"env{i}_{name}_acc"] = acc
                results[f"env{i}_{name}_loss"] = loss
                kept += part
            if evaluation is not None and field is not None:
                y, pred, groups = (torch.cat([k[j] for k in kept]) if kept else torch.zeros(0, dtype=torch.long)
                                   for j in range(3))
                results.update(evaluation.record(f"env{i}_", y, pred, groups))
        for k, (i, idx) in enumerate(sorted((uda or {}).items())):
            acc, loss, _ = _predict(algorithm.predict, dataset[i], idx, transform, device, batch_size, num_workers,
                                    None)
            results[f"env{k}_uda_acc"], results[f"env{k}_uda_loss"] = acc, loss
    finally:
        algorithm.train(was_training)
    if evaluation is not None and test_envs:
        results[GROUPS_KEY] = evaluation.field
        val = dataset.domains.index(evaluation.val_domain) if evaluation.val_domain in dataset.domains else None
        if val is not None and val in test_envs:
            results[VAL_ENV_KEY] = val
    return results
