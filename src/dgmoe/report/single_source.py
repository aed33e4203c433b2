"""Single-source domain generalization tables (GMoE paper, §5.3 Table 3 and App. D.5 Table 12).

A single-source run trains on one domain: its `args.test_envs` are all domains but one. Per run, the
checkpoint is chosen by training-domain validation (the highest `env{train}_out_acc`, earliest on ties),
and across the hparams sweep the run with the highest such value wins (smallest hparams_seed on ties).
At that checkpoint:

- IID accuracy = `env{train}_out_acc`, the training domain's held-out split (the paper's "validation set";
  it is also the selection score, as in the paper);
- OOD accuracy on each other domain j = `env{j}_in_acc` by default, the split DomainBed evaluates test
  domains on (the larger 80%); `ood_split="out"` uses `env{j}_out_acc`, the paper's wording
  ("the rest 5 domains' validation sets").

Cells are mean +/- SE over trial seeds, as in `dgmoe.report.tables`. With a baseline, "IID Imp." is the
relative IID gain (acc - base) / base and "OOD Imp." the mean over OOD domains of the per-domain relative
gains, both in %: this reproduces Table 3 (ResNet101: 1.1% / 12.4%, GMoE-S/16: 10.5% / 42.3% over
ResNet50). `improvement="absolute"` reports percentage points instead.
"""
from __future__ import annotations

from typing import Literal, Mapping, Sequence

import pandas as pd

from dgmoe.document import MISSING, Block, Cell, Document, Preamble, Table
from dgmoe.duplicates import check_unique_runs
from dgmoe.report.protocol import protocol_block
from dgmoe.report.tables import RowKey, avg_cell, dataset_domains, mean_cell, row_labels, user_labels

Split = Literal["in", "out"]
Improvement = Literal["relative", "absolute"]
ACC_COLUMNS = ("dataset", "algorithm", "model", "train_env", "trial_seed", "hparams_seed", "step", "env", "acc")


def single_source_runs(records: pd.DataFrame) -> pd.DataFrame:
    """Records of runs trained on one domain, with a `train_env` column."""
    if records.empty:
        return records.assign(train_env=pd.Series(dtype=int))
    n_test = records["test_envs"].map(len)
    mine = records[(n_test == records["n_envs"] - 1) & (records["n_envs"] >= 2)]
    train_env = [next(e for e in range(n) if e not in t) for n, t in zip(mine["n_envs"], mine["test_envs"])]
    return mine.assign(train_env=pd.Series(train_env, index=mine.index, dtype=int))


def _run_choice(run: pd.DataFrame, train_env: int) -> tuple[float, pd.Series] | None:
    run = run.sort_values("step", kind="stable")
    val = run[f"env{train_env}_out_acc"].astype(float)
    if val.isna().all():
        return None
    best = val.idxmax()
    return float(val[best]), run.loc[best]


def single_source_accs(records: pd.DataFrame, ood_split: Split = "in") -> pd.DataFrame:
    """Long table of selected accuracies: one row per (dataset, algorithm, model, train_env, trial_seed, env)."""
    if ood_split not in ("in", "out"):
        raise ValueError(f"ood_split must be 'in' or 'out', got {ood_split!r}")
    runs = single_source_runs(records)
    check_unique_runs(runs)
    rows = []
    keys = ["dataset", "algorithm", "model", "train_env", "trial_seed"]
    for key, group in runs.groupby(keys, sort=True):
        train_env = int(key[3])
        best: tuple[float, int, pd.Series] | None = None
        for hseed, run in group.groupby("hparams_seed", sort=True):
            choice = _run_choice(run, train_env)
            if choice is not None and (best is None or choice[0] > best[0]):
                best = (choice[0], int(hseed), choice[1])
        if best is None:
            continue
        _, hseed, rec = best
        for env in range(int(rec["n_envs"])):
            split = "out" if env == train_env else ood_split
            rows.append({**dict(zip(keys, key)), "hparams_seed": hseed, "step": int(rec["step"]),
                         "env": env, "acc": float(rec[f"env{env}_{split}_acc"])})
    return pd.DataFrame(rows, columns=list(ACC_COLUMNS))


def improvement(acc: float, base: float, kind: Improvement = "relative") -> float | None:
    """Gain of `acc` over `base` (both in %): relative, in % of base (None for a zero base), or in points."""
    if kind == "absolute":
        return acc - base
    return None if base == 0 else 100.0 * (acc - base) / base


def ood_improvement(accs: Sequence[float], bases: Sequence[float], kind: Improvement = "relative") -> float | None:
    """GMoE Table 3's "OOD Imp.": the mean over test domains of the per-domain improvement."""
    gains = [improvement(a, b, kind) for a, b in zip(accs, bases)]
    if not gains or any(g is None for g in gains):
        return None
    return sum(gains) / len(gains)  # type: ignore[arg-type]


def _gain_cell(gain: float | None, kind: Improvement) -> Cell:
    if gain is None:
        return MISSING
    if kind == "absolute":
        return Cell(mean=gain, signed=True)
    return Cell(mean=gain, unit="%")


def row_aliases(records: pd.DataFrame) -> dict[RowKey, set[str]]:
    """Short names of each (algorithm, model) row besides its label: the bare model name (`args.model`
    without the overrides in the label, e.g. `vit_small_patch16_224` for `vit_small_patch16_224(depth=6)`)
    and the runs' `--label`s."""
    out: dict[RowKey, set[str]] = {}
    columns = [c for c in ("model_name", "label") if c in records.columns]
    for row in records[["algorithm", "model", *columns]].drop_duplicates().to_dict("records"):
        names = {str(row[c]) for c in columns if isinstance(row[c], str) and row[c]}
        out.setdefault((row["algorithm"], row["model"]), set()).update(names)
    return out


def resolve_baseline(keys: Sequence[RowKey], baseline: str,
                     aliases: Mapping[RowKey, set[str]] | None = None) -> RowKey:
    """The (algorithm, model) named by `baseline`: a model (its table label or its bare name), an algorithm,
    "algorithm / model", or a run `--label` (`aliases`, see `row_aliases`)."""
    aliases = aliases or {}

    def names(k: RowKey) -> set[str]:
        short = aliases.get(k, set())
        return {k[0], k[1], f"{k[0]} / {k[1]}", *short, *(f"{k[0]} / {a}" for a in short)}

    found = sorted({k for k in keys if baseline in names(k)})
    labels = sorted({f"{a} / {m}" if m else a for a, m in keys})
    if not found:
        raise ValueError(f"baseline {baseline!r} matches no single-source run; available: {labels}")
    if len(found) > 1:
        names_found = [f"{a} / {m}" for a, m in found]
        raise ValueError(f"baseline {baseline!r} is ambiguous, it matches {names_found}; name one of them")
    return found[0]


def _source_table(accs: pd.DataFrame, domains: list[str], train_env: int, base: RowKey | None,
                  kind: Improvement, title: str, names: Mapping[RowKey, str] | None = None) -> Table:
    keys = sorted(set(zip(accs["algorithm"], accs["model"])))
    labels = row_labels(keys, names)
    means: dict[RowKey, list[float | None]] = {}
    cells: dict[RowKey, list[Cell]] = {}
    for key in keys:
        mine = accs[(accs["algorithm"] == key[0]) & (accs["model"] == key[1])]
        cells[key] = [mean_cell(mine.loc[mine["env"] == env, "acc"]) for env in range(len(domains))]
        means[key] = [c.mean for c in cells[key]]
    ood = [e for e in range(len(domains)) if e != train_env]
    header = ["Algorithm", *(f"{d} (IID)" if e == train_env else d for e, d in enumerate(domains)), "OOD Avg"]
    if base is not None:
        header += ["IID Imp.", "OOD Imp."]
    rows = []
    for key in keys:
        row = [labels[key], *cells[key], avg_cell([cells[key][e] for e in ood])]
        if base is not None:
            row += _gain_cells(means[key], means.get(base), train_env, ood, key == base, kind)
        rows.append(row)
    return Table.make(title, header, rows)


def _gain_cells(mine: list[float | None], base: list[float | None] | None, train_env: int,
                ood: list[int], is_base: bool, kind: Improvement) -> list[Cell]:
    if is_base:
        return [Cell("-"), Cell("-")]
    if base is None:
        return [MISSING, MISSING]
    iid = None
    if mine[train_env] is not None and base[train_env] is not None:
        iid = improvement(mine[train_env], base[train_env], kind)  # type: ignore[arg-type]
    pairs = [(mine[e], base[e]) for e in ood]
    oods = None
    if all(a is not None and b is not None for a, b in pairs):
        oods = ood_improvement([a for a, _ in pairs], [b for _, b in pairs], kind)  # type: ignore[misc]
    return [_gain_cell(iid, kind), _gain_cell(oods, kind)]


def single_source_table(
    records: pd.DataFrame,
    baseline: str | None = None,
    ood_split: Split = "in",
    improvement_kind: Improvement = "relative",
    latex: bool = False,
) -> str:
    """The Markdown (or LaTeX) text of `single_source_document`."""
    return single_source_document(records, baseline, ood_split, improvement_kind).text(latex)


def single_source_document(
    records: pd.DataFrame,
    baseline: str | None = None,
    ood_split: Split = "in",
    improvement_kind: Improvement = "relative",
) -> Document:
    """Single-source tables: one per (dataset, training domain), as GMoE Table 3/12.

    `baseline` names the row the improvements are measured against: a model (`vit_tiny_patch16_224`, which
    also matches runs built with overrides such as `vit_tiny_patch16_224(depth=6)`), an algorithm,
    "algorithm / model", or a run `--label`.
    """
    if improvement_kind not in ("relative", "absolute"):
        raise ValueError(f"improvement_kind must be 'relative' or 'absolute', got {improvement_kind!r}")
    accs = single_source_accs(records, ood_split)
    if accs.empty:
        raise ValueError(
            "no single-source runs: none has args.test_envs listing every domain but one (train on one domain)"
        )
    keys = list(zip(accs["algorithm"], accs["model"]))
    base = resolve_baseline(keys, baseline, row_aliases(records)) if baseline else None
    names = user_labels(records)
    gain = "" if base is None else (
        f" Imp.: improvement over {base[0]} / {base[1]}" if base[1] else f" Imp.: improvement over {base[0]}"
    ) + (", relative, in % of the baseline; OOD Imp. averages it over the OOD domains."
         if improvement_kind == "relative" else ", in accuracy points; OOD Imp. averages it over the OOD domains.")
    text = (
        f"Single-source DG: trained on one domain, checkpoint and hparams chosen on its held-out split. "
        f"IID: the training domain's out split; OOD: the other domains' {ood_split} split. "
        f"Accuracy (%), mean +/- standard error over trial seeds; X: missing.{gain}"
    )
    parts: list[Block] = [Preamble("dgmoe single-source results", (text,)),
                          protocol_block(records, "training-domain validation (the training domain's out split)")]
    for dataset in sorted(accs["dataset"].unique()):
        domains = dataset_domains(records, dataset)
        mine = accs[accs["dataset"] == dataset]
        for train_env in sorted(mine["train_env"].unique()):
            title = f"{dataset}: trained on {domains[int(train_env)]}"
            sub = mine[mine["train_env"] == train_env]
            parts.append(_source_table(sub, domains, int(train_env), base, improvement_kind, title, names))
    return Document(tuple(parts))
