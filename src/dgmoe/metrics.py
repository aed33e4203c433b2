"""Geographic evaluation metrics with WILDS semantics, reimplemented (no `wilds`/`torch_scatter` dependency).

- overall accuracy (`acc_avg`): over all examples, 'Other' included;
- per-group accuracy and count (`acc_region:<name>`, `count_region:<name>`);
- worst-group accuracy (`acc_worst_region`): minimum over groups with at least one example, excluding any
  group whose name contains 'Other' (FMoW's official rule, reference notes §2.4);
- macro-F1 (`f1_macro`): mean F1 over the labels present in the ground truth, as sklearn's
  `f1_score(average='macro', labels=unique(y_true))` (iWildCam, §2.5); a present label never predicted
  counts F1 = 0, predictions of absent labels still count as errors;
- `GroupEvaluation`: what a dataset declares to be scored this way at every checkpoint (the group field of
  its metadata, the group names, the excluded groups, macro-F1, its validation domain) and the record keys
  it writes (`env{i}_acc_avg`, `env{i}_acc_worst_group`, `env{i}_f1_macro`, ...; see `record`).

Model selection by validation worst-group accuracy is `dgmoe.selection.WorstGroupSelection`.

Distribution-shift suites (ImageNet -> V2, R, Sketch, A, ObjectNet): `ShiftSuite` declares a dataset's
in-distribution test domain and its shifts; `LogitFit` is Taori et al.'s baseline (NeurIPS 2020, Sec. 3: OOD
accuracy of standard models is linear in ID accuracy after the logit transform) and `effective_robustness` the
OOD accuracy above it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch


def _flat(name: str, values: torch.Tensor | Sequence[int]) -> torch.Tensor:
    t = torch.as_tensor(values)
    if t.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {tuple(t.shape)}")
    return t.long()


def _predictions(y_pred: torch.Tensor | Sequence[int]) -> torch.Tensor:
    t = torch.as_tensor(y_pred)
    return t.argmax(dim=1) if t.ndim == 2 else _flat("y_pred", t)


def _check(y_true: torch.Tensor, y_pred: torch.Tensor) -> None:
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true has {y_true.numel()} entries but y_pred has {y_pred.numel()}")
    if y_true.numel() == 0:
        raise ValueError("cannot evaluate an empty set of predictions")


def accuracy(y_true, y_pred) -> float:
    """Fraction correct; `y_pred` may be labels [N] or logits [N, C] (argmax)."""
    y_true, y_pred = _flat("y_true", y_true), _predictions(y_pred)
    _check(y_true, y_pred)
    return (y_true == y_pred).float().mean().item()


def group_accuracies(y_true, y_pred, groups, group_names: Sequence[str]) -> dict[str, tuple[float | None, int]]:
    """{group name: (accuracy or None when empty, count)} for every named group."""
    y_true, y_pred, groups = _flat("y_true", y_true), _predictions(y_pred), _flat("groups", groups)
    _check(y_true, y_pred)
    if groups.shape != y_true.shape:
        raise ValueError(f"groups has {groups.numel()} entries but y_true has {y_true.numel()}")
    if bool(((groups < 0) | (groups >= len(group_names))).any()):
        raise ValueError(f"group ids must be in [0, {len(group_names)}) to match group_names {list(group_names)}")
    correct = (y_true == y_pred).float()
    out: dict[str, tuple[float | None, int]] = {}
    for g, name in enumerate(group_names):
        mask = groups == g
        n = int(mask.sum())
        out[name] = (correct[mask].mean().item() if n else None, n)
    return out


def worst_group_accuracy(y_true, y_pred, groups, group_names: Sequence[str],
                         exclude_substring: str | None = "Other") -> float:
    """Minimum accuracy over non-empty groups, skipping names containing `exclude_substring` (WILDS)."""
    accs = group_accuracies(y_true, y_pred, groups, group_names)
    eligible = [acc for name, (acc, _) in accs.items()  # acc is None for an empty group
                if acc is not None and not (exclude_substring and exclude_substring in name)]
    if not eligible:
        raise ValueError(f"no non-empty group to take the worst of (groups {list(group_names)}, excluding names "
                         f"containing {exclude_substring!r})")
    return min(eligible)


def macro_f1(y_true, y_pred) -> float:
    """Macro-F1 over the labels present in `y_true` (sklearn average='macro', labels=unique(y_true))."""
    y_true, y_pred = _flat("y_true", y_true), _predictions(y_pred)
    _check(y_true, y_pred)
    scores = []
    for label in torch.unique(y_true).tolist():
        tp = int(((y_pred == label) & (y_true == label)).sum())
        fp = int(((y_pred == label) & (y_true != label)).sum())
        fn = int(((y_pred != label) & (y_true == label)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / len(scores)


def evaluate_groups(y_true, y_pred, groups, group_names: Sequence[str], group_field: str = "region",
                    exclude_substring: str | None = "Other") -> dict[str, float]:
    """WILDS-style metric dict: acc_avg, f1_macro, acc_/count_<field>:<name>, acc_worst_<field>."""
    out: dict[str, float] = {"acc_avg": accuracy(y_true, y_pred), "f1_macro": macro_f1(y_true, y_pred)}
    for name, (acc, n) in group_accuracies(y_true, y_pred, groups, group_names).items():
        out[f"count_{group_field}:{name}"] = float(n)
        if acc is not None:
            out[f"acc_{group_field}:{name}"] = acc
    out[f"acc_worst_{group_field}"] = worst_group_accuracy(y_true, y_pred, groups, group_names, exclude_substring)
    return out


@dataclass(frozen=True)
class GroupEvaluation:
    """A dataset's WILDS-style evaluation (Koh et al., ICML 2021; reference notes §2.4-2.6).

    - `field`: the metadata key that holds each item's group id (FMoW `region`, Camelyon17 `slide`,
      iWildCam `location_id`);
    - `group_names`: names of the group ids 0, 1, ...; per-group accuracies and counts are recorded only for
      named groups (FMoW's six regions, not Camelyon17's 50 slides or iWildCam's 323 cameras);
    - `exclude_substring`: groups whose name contains it do not count for the worst group (FMoW: 'Other');
    - `f1_macro`: also record macro-F1 (iWildCam's official metric);
    - `val_domain`: the domain whose worst-group accuracy selects checkpoints (the OOD validation split,
      `dgmoe.selection.WorstGroupSelection`);
    - `trial_seeds`: the seeds WILDS asks a leaderboard entry to average (Koh et al., 2021, Sec. 5, App. E:
      3, Camelyon17 10 for its variance);
    - `wilds_name`: WILDS' own name of the dataset (`wilds.get_dataset`, the prefix of the prediction files its
      evaluator `examples/evaluate.py` reads: `fmow`, `iwildcam`, `camelyon17`); None for a split of dgmoe's
      own that WILDS' evaluator does not know (FMoW-LAO);
    - `wilds_splits`: (domain, WILDS split) where a domain is not named as WILDS names its split (Camelyon17's
      hospital_1 is WILDS' `val`, hospital_2 its `test`);
    - `wilds_eval_splits`: the splits WILDS' evaluator reads a prediction file of (every split but `train`).
    """

    field: str
    group_names: tuple[str, ...] | None = None
    exclude_substring: str | None = None
    f1_macro: bool = False
    val_domain: str | None = None
    trial_seeds: int = 3
    wilds_name: str | None = None
    wilds_splits: tuple[tuple[str, str], ...] = ()
    wilds_eval_splits: tuple[str, ...] = ()

    def wilds_split(self, domain: str) -> str:
        """WILDS' name of the split a domain holds (the domain's own name unless `wilds_splits` says otherwise)."""
        return dict(self.wilds_splits).get(domain, domain)

    def names(self, groups: torch.Tensor) -> list[str]:
        """Names for group ids 0..max: the declared ones, else the ids themselves."""
        if self.group_names is not None:
            return list(self.group_names)
        top = int(groups.max()) + 1 if groups.numel() else 0
        return [str(g) for g in range(top)]

    def record(self, prefix: str, y_true, y_pred, groups) -> dict[str, float]:
        """The record keys of one evaluated split, `prefix` (e.g. 'env7_') + 'acc_avg' (all items),
        'acc_worst_group' (WILDS' worst group; NaN when no group qualifies, where WILDS reports 0),
        'f1_macro' (when declared) and, for named groups, 'acc_<field>:<name>' / 'count_<field>:<name>'.
        An empty split gives NaN metrics."""
        y_true, y_pred, groups = _flat("y_true", y_true), _predictions(y_pred), _flat("groups", groups)
        keys = ["acc_avg", "acc_worst_group"] + (["f1_macro"] if self.f1_macro else [])
        if y_true.numel() == 0:
            return {prefix + k: math.nan for k in keys}
        per_group = group_accuracies(y_true, y_pred, groups, self.names(groups))
        eligible = [acc for name, (acc, n) in per_group.items()
                    if acc is not None and not (self.exclude_substring and self.exclude_substring in name)]
        out = {prefix + "acc_avg": accuracy(y_true, y_pred),
               prefix + "acc_worst_group": min(eligible) if eligible else math.nan}
        if self.f1_macro:
            out[prefix + "f1_macro"] = macro_f1(y_true, y_pred)
        if self.group_names is not None:
            for name, (acc, n) in per_group.items():
                out[f"{prefix}count_{self.field}:{name}"] = float(n)
                if acc is not None:
                    out[f"{prefix}acc_{self.field}:{name}"] = acc
        return out


@dataclass(frozen=True)
class ShiftSuite:
    """A dataset evaluated under distribution shift from one run: `id_domain` is its in-distribution test
    domain (ImageNet-val), `shifts` the shifted test domains (ImageNet-V2, -R, -Sketch, -A, ObjectNet)."""

    id_domain: str
    shifts: tuple[str, ...]


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class LogitFit:
    """Taori et al.'s baseline (NeurIPS 2020, Sec. 3, "effective robustness"): the OOD accuracy a standard
    model of ID accuracy `a` reaches, `sigmoid(slope * logit(a) + intercept)`, fitted on a testbed of
    models trained on the ID data alone; `source` says which testbed and who fitted it. Accuracies are
    fractions."""

    slope: float
    intercept: float
    source: str

    def baseline(self, id_acc: float) -> float:
        """The line's OOD accuracy at `id_acc`; at 0 and 1 (no logit) its limit there."""
        if not 0.0 < id_acc < 1.0:
            z = math.copysign(math.inf, (id_acc - 0.5) * self.slope) if self.slope else self.intercept
        else:
            z = self.slope * _logit(id_acc) + self.intercept
        return 1.0 / (1.0 + math.exp(-z)) if math.isfinite(z) else float(z > 0)

    @classmethod
    def fit(cls, id_accs: Sequence[float], ood_accs: Sequence[float], source: str) -> "LogitFit":
        """Least squares in logit space over the testbed's (ID, OOD) accuracies (fractions in (0, 1))."""
        if len(id_accs) != len(ood_accs) or len(id_accs) < 2:
            raise ValueError(f"a logit fit needs at least two (ID, OOD) accuracy pairs, got {len(id_accs)} "
                             f"and {len(ood_accs)} ({source})")
        bad = [a for a in (*id_accs, *ood_accs) if not 0.0 < a < 1.0]
        if bad:
            raise ValueError(f"{source}: accuracies must lie strictly between 0 and 1 (fractions), got {bad[0]}")
        x = [_logit(a) for a in id_accs]
        y = [_logit(a) for a in ood_accs]
        mx, my = sum(x) / len(x), sum(y) / len(y)
        sxx = sum((v - mx) ** 2 for v in x)
        if sxx == 0.0:
            raise ValueError(f"{source}: every testbed model has the same ID accuracy; no line fits")
        slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx
        return cls(slope, my - slope * mx, source)


def effective_robustness(id_acc: float, ood_acc: float, fit: LogitFit) -> float:
    """Taori et al.'s effective robustness: OOD accuracy minus the baseline's at the same ID accuracy."""
    return ood_acc - fit.baseline(id_acc)
