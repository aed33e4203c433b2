"""Weight averaging across the runs of a sweep (`dgmoe soup`): uniform and greedy soups, ratatouille-style
averages and the output ensemble, each written as a run folder of its own with DomainBed records.

- `uniform`: the mean of the weights of every run of one (dataset, held-out domains, trial seed, algorithm,
  model), i.e. of one cell's hparams draws: DiWA's uniform average, theta = (1/M) sum_m theta_m (Rame et al.,
  DiWA, NeurIPS 2022, Eq. 1).
- `greedy`: the same runs ordered by training-domain validation accuracy, best first; a run joins the average
  only if the average's validation accuracy does not drop (DiWA's restricted average, Wortsman et al., Model
  soups, ICML 2022, Recipe 1).
- `ratatouille`: the uniform mean of every run of one (dataset, held-out domains, trial seed, model) that shares
  its initialisation, whatever its algorithm (Rame et al., Model Ratatouille, ICML 2023, Eq. 2: averaging
  fine-tunings that differ in their objective, from one initialisation).
- `ensemble`: the mean of the members' logits (DiWA's ENS baseline, Eq. 4), for comparison.
- `wise-ft`: the zero-shot run's and a fine-tuned run's weights interpolated over an alpha grid, and the alpha
  training-domain validation picks (Wortsman et al., WiSE-FT, CVPR 2022; `dgmoe.sweep.wise_ft`).

Each run contributes its `best` weights (training-domain validation within the run, what `dgmoe train`
keeps; `--weights last` for the last step). The data splits are those of the members' trial seed, so that a
soup is validated on the same training-domain `out` splits its members were; a soup is evaluated on every
domain's splits exactly as a run's checkpoint is, and its one record carries `args.soup` (method, members,
greedy trace). Float tensors are averaged in float64 (the soup of identical runs is each run, bit for bit);
integer buffers are the first member's.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
from safetensors.torch import load_file

from dgmoe.data.loaders import EvalBatches
from dgmoe.devices import resolve_device
from dgmoe.engine.checkpoint import load_state, save_weights
from dgmoe.engine.evaluate import evaluate_domains, split_metrics
from dgmoe.engine.io import atomic_folder, read_jsonl, remove_stale_folders, write_json_atomic, write_jsonl_atomic
from dgmoe.engine.provenance import provenance
from dgmoe.engine.setup import RunSetup, prepare_run
from dgmoe.errors import UsageError
from dgmoe.selection import python_argmax
from dgmoe.sweep import wise_ft
from dgmoe.sweep.config import METHODS, SoupConfig
from dgmoe.sweep.soup_members import SOUP_KEY, LeftOut, Member, check_shared, find_members


@dataclass(frozen=True)
class Plan:
    """One soup to make: its method, its members (sorted by folder), the weights kind it averages and the run
    folders of its group it had to leave out (`--partial`)."""

    method: str
    members: tuple[Member, ...]
    which: str = "best"
    left_out: tuple[LeftOut, ...] = ()
    alpha: float | None = None  # wise-ft: the mixing coefficient (None: chosen on validation); members (ft, zs)
    alphas: tuple[float, ...] = ()  # wise-ft with alpha chosen on validation: the grid

    @property
    def name(self) -> str:
        """The soup's folder: one per method, group (or ratatouille pool) and weights kind, so that a soup made
        again over other members or weights replaces the one made before instead of standing beside it."""
        m = self.members[0]
        envs = "-".join(map(str, m.test_envs))
        alg = m.algorithm if self.method != "ratatouille" else "pool"
        slot = _slot(self.method, self.which, m) + ([str(m.run_dir)] if self.method == "wise-ft" else [])
        tag = hashlib.md5(json.dumps(slot).encode()).hexdigest()[:6]
        last = "_last" if self.which == "last" else ""
        method = self.method if self.method != "wise-ft" else f"wise-ft{'' if self.alpha is None else self.alpha:}"
        return f"{method}_{alg}_{m.model}_{m.dataset}_env{envs}_trial{m.trial_seed}{last}_{tag}"

    @property
    def algorithm(self) -> str:
        """The row name of the soup in results tables (with the weights kind unless `best`, and `partial`)."""
        notes = (["last weights"] if self.which == "last" else []) + (["partial"] if self.left_out else [])
        if self.method == "ratatouille":
            algorithms = ", ".join(sorted({m.algorithm for m in self.members}))
            return f"ratatouille ({algorithms}{'; ' + ', '.join(notes) if notes else ''})"
        if self.method == "wise-ft":
            alpha = "" if self.alpha is None else f" alpha={self.alpha:g}"
            return f"{self.members[0].algorithm} ({', '.join(['WiSE-FT' + alpha, *notes])})"
        kind = self.method + ("" if self.method == "ensemble" else " soup")
        return f"{self.members[0].algorithm} ({', '.join([kind, *notes])})"

    def identity(self) -> dict[str, Any]:
        """What the soup is: its method, members, weights kind and the members' weights (SHA-256), and the run
        folders it left out; a soup folder with another identity is made again."""
        return {"method": self.method, "members": [str(m.run_dir) for m in self.members], "weights": self.which,
                "member_sha256": [m.sha256 for m in self.members],
                "left_out": [str(x.run_dir) for x in self.left_out],
                "alphas": list(self.alphas) if self.alpha is None else [self.alpha]}


def _slot(method: str, which: str, member: Member) -> list:
    """What one soup folder stands for: a method and weights kind over one group (ratatouille: one pool)."""
    m = member
    return [method, which, m.dataset, list(m.test_envs), m.trial_seed, m.model,
            m.initialisation if method == "ratatouille" else m.algorithm]


def _older_soups(out: Path, plans: Sequence[Plan]) -> list[Path]:
    """Soup folders in `out` that stand for the same soup as a plan under another name (made by an earlier
    dgmoe, which named a soup by its members): `results` would list both."""
    names = {p.name for p in plans}
    slots = [_slot(p.method, p.which, p.members[0]) for p in plans]
    older = []
    for folder in sorted(f for f in out.iterdir() if f.is_dir() and not f.name.startswith(".") and f.name not in names):
        try:
            config = json.loads((folder / "config.json").read_text())
            info = config[SOUP_KEY]
            which = "last" if str(info.get("weights")) in ("last", "model.safetensors") else "best"
            slot = _slot(info["method"], which, Member(folder, config, folder))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, UsageError):
            continue
        if slot in slots:
            older.append(folder)
    return older


def _left_out_of(method: str, group: tuple, left_out: Sequence[LeftOut]) -> tuple[LeftOut, ...]:
    """The left-out run folders that would have belonged to a soup of `group` (all those of unknown group)."""
    if method == "ratatouille":
        return tuple(x for x in left_out if x.pool is None or x.pool == group[:4])
    return tuple(x for x in left_out if x.group is None or x.group == group)


def plan_soups(members: Sequence[Member], methods: Sequence[str], which: str = "best",
               left_out: Sequence[LeftOut] = (), zero_shot: Member | None = None,
               alphas: Sequence[float] = ()) -> list[Plan]:
    """Every soup of `methods` over `members` (groups of one run are left out); refuses, in one line, a group
    whose runs do not share an architecture, an initialisation or their data (before anything is written).
    `left_out`: run folders that could not be members, named in the record of each soup of their group. WiSE-FT
    pairs `zero_shot` with each fine-tuned run: one plan per alpha of `alphas`, and one choosing alpha."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"--method {unknown[0]!r} is not one of {', '.join(METHODS)}")
    plans: list[Plan] = []
    if "wise-ft" in methods:
        if zero_shot is None:
            raise UsageError("--method wise-ft needs --zero-shot RUN_DIR")
        for ft, zs in wise_ft.pairs(members, zero_shot):
            plans += [Plan("wise-ft", (ft, zs), which, alpha=a) for a in alphas]
            plans.append(Plan("wise-ft", (ft, zs), which, alphas=tuple(alphas)))
    if zero_shot is not None:  # the zero-shot run is no hparams draw of a cell
        members = [m for m in members if m.run_dir.resolve() != zero_shot.run_dir.resolve()]
    cells: dict[tuple, list[Member]] = defaultdict(list)
    for m in members:
        cells[m.group].append(m)
    per_cell = [m for m in methods if m in ("uniform", "greedy", "ensemble")]
    for key in sorted(cells, key=str):
        group = cells[key]
        if len(group) < 2 or not per_cell:
            continue
        check_shared(group)
        plans += [Plan(method, tuple(group), which, _left_out_of(method, key, left_out)) for method in per_cell]
    if "ratatouille" in methods:
        pools: dict[tuple, list[Member]] = defaultdict(list)
        for m in members:
            pools[(m.dataset, m.test_envs, m.trial_seed, m.model, m.initialisation)].append(m)
        for key in sorted(pools, key=str):
            if len(pools[key]) >= 2:
                check_shared(pools[key])
                plans.append(Plan("ratatouille", tuple(pools[key]), which,
                                  _left_out_of("ratatouille", key, left_out)))
    return plans


def average_states(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """(1/M) sum_m theta_m of every float tensor (summed in float64), the first state's integer buffers."""
    out = {}
    for key, first in states[0].items():
        if first.is_floating_point():
            out[key] = (torch.stack([s[key].double() for s in states]).sum(0) / len(states)).to(first.dtype)
        else:
            out[key] = first.clone()
    return out


class Ensemble(nn.Module):
    """The mean of the members' logits (each member an algorithm holding one run's weights)."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(members)

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return torch.stack([m.predict(x, meta).float() for m in self.members]).mean(0)  # type: ignore[operator]


class _Evaluator:
    """The data, splits and an algorithm of one (dataset, held-out domains, trial seed), built once."""

    def __init__(self, member: Member, options: SoupConfig):
        options = dataclasses.replace(options, device=resolve_device(options.device))  # (auto: the device used)
        run = member.run.replace(device=options.device, **({"data_dir": options.data_dir} if options.data_dir
                                                               else {}))
        self.setup: RunSetup = prepare_run(run)
        self.options = options
        self.batches = EvalBatches(self.setup.eval_transform, options.eval_batch_size, options.num_workers)
        self.setup.algorithm.to(options.device)

    def holding(self, state: dict[str, torch.Tensor]) -> nn.Module:
        """The run's algorithm with `state` loaded into the network it predicts with."""
        load_state(self.setup.algorithm.inference_network(), state)
        return self.setup.algorithm

    def val_acc(self, predictor: Any) -> float:
        """Training-domain validation accuracy: the mean `out` accuracy over the training domains (DomainBed)."""
        s = self.setup
        was = predictor.training
        predictor.eval()
        try:
            accs = [split_metrics(predictor.predict, s.dataset[i], s.splits[i][1], s.eval_transform,
                                  self.options.device, batches=self.batches)[0] for i in s.train_envs]
        finally:
            predictor.train(was)
        return sum(accs) / len(accs)

    def record(self, predictor: Any) -> dict[str, Any]:
        s = self.setup
        return evaluate_domains(predictor, s.dataset, s.splits, s.eval_transform, self.options.device,
                                test_envs=s.test_envs, uda=s.uda, batches=self.batches)


def _states(plan: Plan) -> list[dict[str, torch.Tensor]]:
    return [load_file(str(m.weights)) for m in plan.members]


def cook(plan: Plan, evaluator: _Evaluator) -> tuple[Any, dict[str, torch.Tensor] | None, dict[str, Any]]:
    """(predictor, averaged weights or None for the ensemble, what the record says of the soup)."""
    states = _states(plan)
    names = [str(m.run_dir) for m in plan.members]
    info: dict[str, Any] = {"method": plan.method, "members": names}
    if plan.method == "wise-ft":
        return _cook_wise_ft(plan, evaluator, states, info)
    if plan.method == "ensemble":
        algorithms = []
        for state in states:
            algorithms.append(copy.deepcopy(evaluator.holding(state)))
        return Ensemble(algorithms), None, info
    if plan.method != "greedy":
        state = average_states(states)
        return evaluator.holding(state), state, info
    vals = [evaluator.val_acc(evaluator.holding(s)) for s in states]
    order = sorted(range(len(states)), key=lambda k: (-vals[k], names[k]))
    chosen, best = [order[0]], vals[order[0]]
    trace = [{"run": names[order[0]], "run_val_acc": vals[order[0]], "soup_val_acc": best, "added": True}]
    for k in order[1:]:
        candidate = evaluator.val_acc(evaluator.holding(average_states([states[j] for j in chosen + [k]])))
        added = candidate >= best
        trace.append({"run": names[k], "run_val_acc": vals[k], "soup_val_acc": candidate, "added": added})
        if added:
            chosen, best = chosen + [k], candidate
    state = average_states([states[j] for j in chosen])
    info.update(selected=[names[j] for j in chosen], trace=trace, val_acc=best)
    return evaluator.holding(state), state, info


def _cook_wise_ft(plan: Plan, evaluator: _Evaluator, states: list[dict[str, torch.Tensor]],
                  info: dict[str, Any]) -> tuple[Any, dict[str, torch.Tensor], dict[str, Any]]:
    """WiSE-FT at the plan's alpha, or at the alpha of `evaluator.options.alphas` with the best training-domain
    validation accuracy (the first of equal ones); states are (fine-tuned, zero-shot)."""
    theta_1, theta_0 = states
    info.update(zero_shot=str(plan.members[1].run_dir), fine_tuned=str(plan.members[0].run_dir))
    alpha = plan.alpha
    if alpha is None:
        curve = [{"alpha": a, "val_acc": evaluator.val_acc(evaluator.holding(wise_ft.interpolate(theta_0, theta_1, a)))}
                 for a in evaluator.options.alphas]
        best = python_argmax([c["val_acc"] for c in curve])
        alpha = curve[best if best is not None else 0]["alpha"]
        info.update(curve=curve, chosen_by="training-domain validation accuracy")
    state = wise_ft.interpolate(theta_0, theta_1, alpha)
    info.update(alpha=alpha)
    return evaluator.holding(state), state, info


def _member_args(member: Member) -> tuple[dict[str, Any], int]:
    """The `args` of a member's last record and the step its weights were saved at."""
    from dgmoe.engine.checkpoint import checkpoint_step

    records = read_jsonl(member.run_dir / "results.jsonl")
    step = checkpoint_step(member.weights)
    return dict(records[-1]["args"]), step if step is not None else int(records[-1]["step"])


def write_soup(plan: Plan, folder: Path, evaluator: _Evaluator) -> dict[str, Any]:
    """Make one soup and write its run folder whole (`dgmoe.engine.io.atomic_folder`: a kill leaves the folder
    as it was, or the new one): config.json, results.jsonl (one record), its weights, done."""
    predictor, state, info = cook(plan, evaluator)
    results = evaluator.record(predictor)
    first_args, step = _member_args(plan.members[0])
    steps = [_member_args(m)[1] for m in plan.members]
    info.update(plan.identity(), weights_files=[m.weights.name for m in plan.members],
                initialisation=plan.members[0].initialisation, member_steps=steps,
                partial=[{"run": str(x.run_dir), "reason": x.reason} for x in plan.left_out])
    args = {**first_args, "algorithm": plan.algorithm, "hparams_seed": 0, "output_dir": str(folder),
            "steps": None, "checkpoint_freq": None, "label": None, SOUP_KEY: info}
    record = {"step": max(steps), **results, "hparams": {"soup": plan.method, "members": len(plan.members)},
              "args": args}
    config = {**plan.members[0].config, SOUP_KEY: info, "provenance": provenance(evaluator.options.device)}
    with atomic_folder(folder) as tmp:
        write_json_atomic(tmp / "config.json", config)
        if state is not None:
            evaluator.holding(state)
            save_weights(evaluator.setup.algorithm.inference_network(), tmp / "model.safetensors",
                         metadata={"step": str(max(steps)), "soup": plan.method})
        write_jsonl_atomic(tmp / "results.jsonl", [record])
        write_json_atomic(tmp / "done", {"status": "done", "records": 1, "last_step": record["step"],
                                        "stopped_early": False, "keep_resume": False})
    return record


def _refuse_left_out(root: Path, left_out: Sequence[LeftOut]) -> None:
    shown = "; ".join(f"{x.run_dir} ({x.reason})" for x in left_out[:3])
    more = f"; and {len(left_out) - 3} more" if len(left_out) > 3 else ""
    raise UsageError(f"{root}: {len(left_out)} run folder(s) cannot be averaged: {shown}{more}. Wait for "
                     "runs to finish and repair or remove the others, or pass --partial to make the soups without "
                     "them (each soup then says so in its record and its table row)")


def make_soups(root: Path, out: Path | None = None, options: SoupConfig = SoupConfig(),
               echo: Callable[[str], None] = lambda s: None) -> list[Path]:
    """Every soup of `options.methods` over the finished runs under `root`, written under `out` (default
    root/soups); returns their folders. A soup folder of the same identity (`Plan.identity`) is kept as it is;
    one of another identity (other members, weights, or weights changed since) is made again in its place. Run
    folders that cannot be members (unfinished, unreadable) are refused in one line, or, with
    `options.partial`, left out and named in the record of every soup of their group."""
    members, left_out = find_members(root, options.which)
    if left_out and not options.partial:
        _refuse_left_out(root, left_out)
    if not members:
        raise UsageError(f"{root} holds no finished run with {options.which} weights (a soup averages run folders)")
    zero_shot = None
    if options.zero_shot is not None:
        zero_shot = next((m for m in find_members(Path(options.zero_shot), options.which)[0]
                          if m.run_dir.resolve() == Path(options.zero_shot).resolve()), None)
        if zero_shot is None:
            raise UsageError(f"--zero-shot {options.zero_shot} is not a finished run folder with {options.which} "
                             "weights")
    plans = plan_soups(members, options.methods, options.which, left_out, zero_shot, options.alphas)
    if not plans:
        raise UsageError(f"{root}: no two runs share a dataset, held-out domains, trial seed and model; nothing to "
                         "average")
    out = out or Path(root) / "soups"
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(f"--out {out} is not a folder ({existing} is a file); give a folder for the soups' run "
                         "folders")
    if out.is_dir():
        for stale in remove_stale_folders(out):
            echo(f"removed {stale}, left by a soup that was stopped while writing")
        for older in _older_soups(out, plans):
            echo(f"warning: {older} is an older soup of the same runs under another name (an earlier dgmoe named "
                 "soups by their members); `dgmoe results` would list it beside the current one: delete it")
    evaluators: dict[tuple, _Evaluator] = {}
    folders = []
    for plan in plans:
        folder = out / plan.name
        folders.append(folder)
        made = _made_soup(folder)
        if made == plan.identity():
            echo(f"{folder} is made already (same members and weights); kept")
            continue
        m = plan.members[0]
        key = (m.dataset, m.test_envs, m.trial_seed, m.run_dir if plan.method == "ratatouille" else m.algorithm)
        if key not in evaluators:
            evaluators[key] = _Evaluator(m, options)
        record = write_soup(plan, folder, evaluators[key])
        test = [record[f"env{i}_in_acc"] for i in m.test_envs]
        partial = f", partial: {len(plan.left_out)} run(s) left out" if plan.left_out else ""
        again = " (made again: its members or their weights changed)" if made is not None else ""
        echo(f"{plan.method}: {len(plan.members)} runs{partial} -> {folder}{again} (test accuracy "
             f"{sum(test) / len(test):.4f})")
    return folders


def _made_soup(folder: Path) -> dict[str, Any] | None:
    """The identity (`Plan.identity`) of the finished soup in `folder`, {} for an older soup's, None for none."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    info = config.get(SOUP_KEY) if isinstance(config, dict) else None
    if not isinstance(info, dict) or not (folder / "done").exists():
        return None
    keys = ("method", "members", "weights", "member_sha256", "left_out", "alphas")
    return {k: info[k] for k in keys} if all(k in info for k in keys) else {}
