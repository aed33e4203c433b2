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
from dgmoe.engine.checkpoint import load_state, save_weights
from dgmoe.engine.evaluate import evaluate_domains, split_metrics
from dgmoe.engine.io import read_jsonl, write_json_atomic, write_jsonl_atomic
from dgmoe.engine.provenance import provenance
from dgmoe.engine.setup import RunSetup, prepare_run
from dgmoe.errors import UsageError
from dgmoe.selection import python_argmax
from dgmoe.sweep import wise_ft
from dgmoe.sweep.options import METHODS, SoupOptions
from dgmoe.sweep.soup_members import SOUP_KEY, Member, check_shared, find_members


@dataclass(frozen=True)
class Plan:
    """One soup to make: its method and its members (sorted by folder)."""

    method: str
    members: tuple[Member, ...]
    alpha: float | None = None  # wise-ft: the mixing coefficient (None: chosen on validation); members (ft, zs)

    @property
    def name(self) -> str:
        m = self.members[0]
        envs = "-".join(map(str, m.test_envs))
        alg = m.algorithm if self.method != "ratatouille" else "+".join(sorted({x.algorithm for x in self.members}))
        tag = hashlib.md5("\n".join(str(x.run_dir) for x in self.members).encode()).hexdigest()[:6]
        method = self.method if self.method != "wise-ft" else f"wise-ft{'' if self.alpha is None else self.alpha:}"
        return f"{method}_{alg}_{m.model}_{m.dataset}_env{envs}_trial{m.trial_seed}_{tag}"

    @property
    def algorithm(self) -> str:
        """The row name of the soup in results tables."""
        if self.method == "ratatouille":
            return f"ratatouille ({', '.join(sorted({m.algorithm for m in self.members}))})"
        if self.method == "wise-ft":
            return f"{self.members[0].algorithm} (WiSE-FT{'' if self.alpha is None else f' alpha={self.alpha:g}'})"
        return f"{self.members[0].algorithm} ({self.method}{'' if self.method == 'ensemble' else ' soup'})"


def plan_soups(members: Sequence[Member], methods: Sequence[str], zero_shot: Member | None = None,
               alphas: Sequence[float] = ()) -> list[Plan]:
    """Every soup of `methods` over `members` (groups of one run are left out); refuses, in one line, a group
    whose runs do not share an architecture or an initialisation (before anything is written). WiSE-FT pairs
    `zero_shot` with each fine-tuned run: one plan per alpha of `alphas`, and one choosing alpha."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"--method {unknown[0]!r} is not one of {', '.join(METHODS)}")
    plans: list[Plan] = []
    if "wise-ft" in methods:
        if zero_shot is None:
            raise UsageError("--method wise-ft needs --zero-shot RUN_DIR")
        for ft, zs in wise_ft.pairs(members, zero_shot):
            plans += [Plan("wise-ft", (ft, zs), a) for a in alphas] + [Plan("wise-ft", (ft, zs))]
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
        plans += [Plan(method, tuple(group)) for method in per_cell]
    if "ratatouille" in methods:
        pools: dict[tuple, list[Member]] = defaultdict(list)
        for m in members:
            pools[(m.dataset, m.test_envs, m.trial_seed, m.model, m.initialisation)].append(m)
        for key in sorted(pools, key=str):
            if len(pools[key]) >= 2:
                check_shared(pools[key])
                plans.append(Plan("ratatouille", tuple(pools[key])))
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

    def __init__(self, member: Member, options: SoupOptions):
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
    """Make one soup and write its run folder: config.json, results.jsonl (one record), its weights, done."""
    predictor, state, info = cook(plan, evaluator)
    results = evaluator.record(predictor)
    first_args, step = _member_args(plan.members[0])
    steps = [_member_args(m)[1] for m in plan.members]
    info.update(weights=plan.members[0].weights.name, initialisation=plan.members[0].initialisation,
                member_steps=steps)
    args = {**first_args, "algorithm": plan.algorithm, "hparams_seed": 0, "output_dir": str(folder),
            "steps": None, "checkpoint_freq": None, "label": None, SOUP_KEY: info}
    record = {"step": max(steps), **results, "hparams": {"soup": plan.method, "members": len(plan.members)},
              "args": args}
    folder.mkdir(parents=True, exist_ok=True)
    config = {**plan.members[0].config, SOUP_KEY: info, "provenance": provenance(evaluator.options.device)}
    write_json_atomic(folder / "config.json", config)
    if state is not None:
        evaluator.holding(state)
        save_weights(evaluator.setup.algorithm.inference_network(), folder / "model.safetensors",
                     metadata={"step": str(max(steps)), "soup": plan.method})
    write_jsonl_atomic(folder / "results.jsonl", [record])
    write_json_atomic(folder / "done", {"status": "done", "records": 1, "last_step": record["step"],
                                       "stopped_early": False, "keep_resume": False})
    return record


def make_soups(root: Path, out: Path | None = None, options: SoupOptions = SoupOptions(),
               echo: Callable[[str], None] = lambda s: None) -> list[Path]:
    """Every soup of `options.methods` over the finished runs under `root`, written under `out` (default
    root/soups); returns their folders. A soup folder already holding the same members is kept as it is."""
    members = find_members(root, options.which)
    if not members:
        raise UsageError(f"{root} holds no finished run with {options.which} weights (a soup averages run folders)")
    zero_shot = None
    if options.zero_shot is not None:
        zero_shot = next((m for m in find_members(Path(options.zero_shot), options.which)
                          if m.run_dir.resolve() == Path(options.zero_shot).resolve()), None)
        if zero_shot is None:
            raise UsageError(f"--zero-shot {options.zero_shot} is not a finished run folder with {options.which} "
                             "weights")
    plans = plan_soups(members, options.methods, zero_shot, options.alphas)
    if not plans:
        raise UsageError(f"{root}: no two runs share a dataset, held-out domains, trial seed and model; nothing to "
                         "average")
    out = out or Path(root) / "soups"
    evaluators: dict[tuple, _Evaluator] = {}
    folders = []
    for plan in plans:
        folder = out / plan.name
        folders.append(folder)
        if _same_soup(folder, plan, options.alphas):
            echo(f"{folder} is made already (same members); kept")
            continue
        m = plan.members[0]
        key = (m.dataset, m.test_envs, m.trial_seed, m.run_dir if plan.method == "ratatouille" else m.algorithm)
        if key not in evaluators:
            evaluators[key] = _Evaluator(m, options)
        record = write_soup(plan, folder, evaluators[key])
        test = [record[f"env{i}_in_acc"] for i in m.test_envs]
        echo(f"{plan.method}: {len(plan.members)} runs -> {folder} (test accuracy "
             f"{sum(test) / len(test):.4f})")
    return folders


def _same_soup(folder: Path, plan: Plan, alphas: Sequence[float] = ()) -> bool:
    """Whether `folder` holds `plan`'s soup already: the same members (WiSE-FT: and the same alpha, or for the
    alpha chosen on validation the same grid `alphas`)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    info = config.get(SOUP_KEY, {})
    same = (folder / "done").exists() and info.get("members") == [str(m.run_dir) for m in plan.members]
    if same and plan.method == "wise-ft":
        same = (info.get("alpha") == plan.alpha if plan.alpha is not None
                else [c["alpha"] for c in info.get("curve", [])] == list(alphas))
    return same
