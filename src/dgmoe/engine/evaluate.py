"""Accuracy and loss of an algorithm on every domain's in/out split (DomainBed's `misc.accuracy`), and the
WILDS metrics of the held-out domains of datasets that declare a group evaluation.

For such a dataset (`MultiDomainDataset.evaluation`, e.g. FMoW's regions) every held-out domain i also
gets the metrics of `GroupEvaluation.record` over its whole split, in and out parts together, under
`env{i}_acc_avg`, `env{i}_acc_worst_group`, `env{i}_f1_macro`, ... (Koh et al., WILDS, ICML 2021), and
the record names the group field, `wilds_groups` (e.g. 'region'), and the validation domain of
worst-group selection, `wilds_val_env`, when it is held out. A distribution-shift suite's held-out domains
(`MultiDomainDataset.shifts`) also get their accuracy over the whole domain, `env{i}_acc_all`; domains labelled
in classes of their own (`MultiDomainDataset.class_maps`: ImageNet-R, -A, ObjectNet) are scored on the
network's logits projected onto those classes.
These come from the predictions the accuracies are computed from: no extra forward pass.

`sampled_splits` gives the fixed, seeded per-split samples a run with `--eval-sample N` evaluates at its
intermediate checkpoints (the same images at every checkpoint, so that they compare; every image at the last).
"""
from __future__ import annotations

from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dgmoe.data.base import Batch, ClassMap, MultiDomainDataset
from dgmoe.data.loaders import EvalBatches
from dgmoe.seeding import seed_hash

#: record keys: the validation domain's index (`dgmoe.selection.WorstGroupSelection`), the group field
VAL_ENV_KEY, GROUPS_KEY = "wilds_val_env", "wilds_groups"
#: record key suffix of a shift suite's held-out domains: accuracy over the whole domain (in and out parts)
SHIFT_ACC = "acc_all"


@torch.no_grad()
@torch.compiler.set_stance("force_eager")
def _predict_parts(predict: Callable, batches: Iterator[tuple[int, Batch]], num_parts: int, device: str,
                   group_parts: Mapping[int, str], class_maps: Mapping[int, ClassMap] | None = None,
                   ) -> tuple[list[float], list[float], dict[int, list]]:
    """Accuracy and mean loss of every part, and [(y, predicted class, group) per batch] of the parts in
    `group_parts` (part -> group field); the parts in `class_maps` are scored on `ClassMap.project`ed logits
    (a domain labelled in classes of its own: ImageNet-R, -A, ObjectNet). Sums stay on the device and are read
    back once, at the end: on a GPU an evaluation then never waits for a batch before queueing the next.
    A network compiled for training (`--compile`) runs eagerly here: evaluation's modes and batch sizes
    (the last batch of every split is shorter) would each compile new graphs, using up dynamo's recompile
    limit for the training step's blocks, for a pass that is a small part of a run's time."""
    correct = torch.zeros(num_parts, dtype=torch.float64, device=device)
    losses = torch.zeros(num_parts, dtype=torch.float64, device=device)
    totals = [0] * num_parts
    kept: dict[int, list] = {p: [] for p in group_parts}
    for part, batch in batches:
        batch = batch.to(device)
        logits = predict(batch.x, batch.meta).float()
        if class_maps and part in class_maps:
            logits = class_maps[part].project(logits)
        losses[part] += F.cross_entropy(logits, batch.y, reduction="sum").double()
        pred = logits.argmax(1)
        correct[part] += (pred == batch.y).sum().double()
        totals[part] += len(batch.y)
        field = group_parts.get(part)
        if field is not None and batch.meta is not None:
            kept[part].append((batch.y, pred, batch.meta[field].reshape(-1)))
    sums = torch.stack([correct, losses]).cpu().tolist()
    accs = [c / n if n else float("nan") for c, n in zip(sums[0], totals)]
    mean_losses = [loss / n if n else float("nan") for loss, n in zip(sums[1], totals)]
    kept = {p: [tuple(t.cpu() for t in k) for k in ks] for p, ks in kept.items()}
    return accs, mean_losses, kept


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
                  num_workers: int = 0, batches: EvalBatches | None = None,
                  class_map: ClassMap | None = None) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of `predict` on `indices` of `dataset` (scored in the classes of
    `class_map` when the domain has one)."""
    batches = batches or EvalBatches(transform, batch_size, num_workers)
    maps = {0: class_map} if class_map is not None else None
    accs, losses, _ = _predict_parts(predict, batches([(dataset, indices)]), 1, device, {}, maps)
    return accs[0], losses[0]


def online_val_loss(algorithm, dataset: MultiDomainDataset, splits: Sequence[tuple[np.ndarray, np.ndarray]],
                    train_envs: Sequence[int], device: str, batches: EvalBatches) -> float | None:
    """Mean cross-entropy of the weights being trained (`predict_online`) over the training domains' out
    splits, for algorithms that select on it (`NEEDS_VAL_LOSS`: SWAD); None for the others, at no cost."""
    if not getattr(algorithm, "NEEDS_VAL_LOSS", False):
        return None
    parts = [(dataset[i], splits[i][1]) for i in train_envs]
    was_training = algorithm.training
    algorithm.eval()
    try:
        _, losses, _ = _predict_parts(algorithm.predict_online, batches(parts), len(parts), device, {})
    finally:
        algorithm.train(was_training)
    sizes = [len(splits[i][1]) for i in train_envs]
    return sum(loss * n for loss, n in zip(losses, sizes) if n) / sum(sizes) if sum(sizes) else None


def evaluate_domains(algorithm, dataset: MultiDomainDataset, splits: Sequence[tuple[np.ndarray, np.ndarray]],
                     transform, device: str, batch_size: int = 64, num_workers: int = 0,
                     test_envs: Sequence[int] = (), uda: Mapping[int, np.ndarray] | None = None,
                     batches: EvalBatches | None = None) -> dict[str, float | int | str]:
    """`env{i}_{in,out}_{acc,loss}` for every domain i, in eval mode, plus the WILDS metrics of the held-out
    domains `test_envs` when the dataset declares a group evaluation; restores train mode after.

    `uda` (test domain -> its unlabeled split, `dgmoe.data.uda_splits`) adds `env{k}_uda_{acc,loss}` where k
    counts the uda splits in domain order, as DomainBed names them (its k is not the domain's index).
    `batches` (one `EvalBatches` per run) keeps the loader workers alive between checkpoints."""
    evaluation = dataset.evaluation
    was_training = algorithm.training
    algorithm.eval()
    parts = [(dataset[i], idx) for i, split in enumerate(splits) for idx in split]  # env i: parts 2i (in), 2i+1 (out)
    uda_items = sorted((uda or {}).items())
    parts += [(dataset[i], idx) for i, idx in uda_items]
    group_parts = {}
    if evaluation is not None:
        group_parts = {2 * i + j: evaluation.field for i in test_envs for j in (0, 1)}
    class_maps = {p: dataset.class_maps[dataset.domains[i]] for p, i in
                  [(2 * i + j, i) for i in range(len(splits)) for j in (0, 1)]
                  + [(2 * len(splits) + k, i) for k, (i, _) in enumerate(uda_items)]
                  if dataset.domains[i] in dataset.class_maps}
    batches = batches or EvalBatches(transform, batch_size, num_workers)
    try:
        accs, losses, kept = _predict_parts(algorithm.predict, batches(parts), len(parts), device, group_parts,
                                            class_maps)
    finally:
        algorithm.train(was_training)
    results: dict[str, float | int | str] = {}
    for i in range(len(splits)):
        for j, name in enumerate(("in", "out")):
            results[f"env{i}_{name}_acc"], results[f"env{i}_{name}_loss"] = accs[2 * i + j], losses[2 * i + j]
        if evaluation is not None and i in test_envs:
            both = kept[2 * i] + kept[2 * i + 1]
            y, pred, groups = (torch.cat([k[j] for k in both]) if both else torch.zeros(0, dtype=torch.long)
                               for j in range(3))
            results.update(evaluation.record(f"env{i}_", y, pred, groups))
    if dataset.shifts is not None:  # a shift suite's held-out domains are scored whole (`dgmoe.report.shifts`)
        for i in test_envs:
            sizes = [len(splits[i][0]), len(splits[i][1])]
            correct = sum(accs[2 * i + j] * n for j, n in enumerate(sizes) if n)
            results[f"env{i}_{SHIFT_ACC}"] = correct / sum(sizes) if sum(sizes) else float("nan")
    for k in range(len(uda_items)):
        part = 2 * len(splits) + k
        results[f"env{k}_uda_acc"], results[f"env{k}_uda_loss"] = accs[part], losses[part]
    if evaluation is not None and test_envs:
        results[GROUPS_KEY] = evaluation.field
        val = dataset.domains.index(evaluation.val_domain) if evaluation.val_domain in dataset.domains else None
        if val is not None and val in test_envs:
            results[VAL_ENV_KEY] = val
    return results
