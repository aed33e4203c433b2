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
- `ensemble`: the mean of the members' logits (DiWA's ENS baseline, Eq. 4; `EnsembleOfAverages`), for
  comparison.
- `wise-ft`: the zero-shot run's and a fine-tuned run's weights interpolated over an alpha grid, and the alpha
  training-domain validation picks (Wortsman et al., WiSE-FT, CVPR 2022; `dgmoe.posthoc.wise_ft`).

Each run contributes its `best` weights (training-domain validation within the run, what `dgmoe train`
keeps; `--weights last` for the last step). The data splits are those of the members' trial seed, so that a
soup is validated on the same training-domain `out` splits its members were; a soup is evaluated on every
domain's splits exactly as a run's checkpoint is, and its one record carries `args.soup` (method, members,
greedy trace). Weights are averaged by the one rule of `dgmoe.algorithms.averaging`: float tensors in float64
(the soup of identical runs is each run, bit for bit), integer buffers the first member's. Which soups are made
is planned in `dgmoe.posthoc.plans`; each soup's run folder is written by `dgmoe.engine.rundir.RunWriter`.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from safetensors.torch import load_file

from dgmoe.algorithms.averaging import weighted_mean
from dgmoe.algorithms.sma import EnsembleOfAverages
from dgmoe.engine.io import atomic_folder, read_jsonl, remove_stale_folders
from dgmoe.engine.provenance import provenance
from dgmoe.engine.rundir import RunWriter, read_done
from dgmoe.errors import UsageError
from dgmoe.posthoc import wise_ft
from dgmoe.posthoc.config import SoupConfig
from dgmoe.posthoc.evaluator import Evaluator
from dgmoe.posthoc.members import SOUP_KEY, LeftOut, Member, find_members
from dgmoe.posthoc.plans import Plan, older_soups, plan_soups
from dgmoe.selection import python_argmax


def _states(plan: Plan) -> list[dict[str, torch.Tensor]]:
    return [load_file(str(m.weights)) for m in plan.members]


def cook(plan: Plan, evaluator: Evaluator) -> tuple[Any, dict[str, torch.Tensor] | None, dict[str, Any]]:
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
        return EnsembleOfAverages(algorithms), None, info
    if plan.method != "greedy":
        state = weighted_mean(states)
        return evaluator.holding(state), state, info
    vals = [evaluator.val_acc(evaluator.holding(s)) for s in states]
    order = sorted(range(len(states)), key=lambda k: (-vals[k], names[k]))
    chosen, best = [order[0]], vals[order[0]]
    trace = [{"run": names[order[0]], "run_val_acc": vals[order[0]], "soup_val_acc": best, "added": True}]
    for k in order[1:]:
        candidate = evaluator.val_acc(evaluator.holding(weighted_mean([states[j] for j in chosen + [k]])))
        added = candidate >= best
        trace.append({"run": names[k], "run_val_acc": vals[k], "soup_val_acc": candidate, "added": added})
        if added:
            chosen, best = chosen + [k], candidate
    state = weighted_mean([states[j] for j in chosen])
    info.update(selected=[names[j] for j in chosen], trace=trace, val_acc=best)
    return evaluator.holding(state), state, info


def _cook_wise_ft(plan: Plan, evaluator: Evaluator, states: list[dict[str, torch.Tensor]],
                  info: dict[str, Any]) -> tuple[Any, dict[str, torch.Tensor], dict[str, Any]]:
    """WiSE-FT at the plan's alpha, or at the alpha of `plan.alphas` with the best training-domain
    validation accuracy (the first of equal ones); states are (fine-tuned, zero-shot)."""
    theta_1, theta_0 = states
    info.update(zero_shot=str(plan.members[1].run_dir), fine_tuned=str(plan.members[0].run_dir))
    alpha = plan.alpha
    if alpha is None:
        curve = [{"alpha": a, "val_acc": evaluator.val_acc(evaluator.holding(wise_ft.interpolate(theta_0, theta_1, a)))}
                 for a in plan.alphas]
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


def write_soup(plan: Plan, folder: Path, evaluator: Evaluator) -> dict[str, Any]:
    """Make one soup and write its run folder whole (`dgmoe.engine.io.atomic_folder`: a kill leaves the folder
    as it was, or the new one) through `RunWriter`: config.json, results.jsonl (one record), its weights, done."""
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
    config = {**plan.members[0].config, SOUP_KEY: info, "provenance": provenance(evaluator.device)}
    network = None
    if state is not None:
        evaluator.holding(state)
        network = evaluator.setup.algorithm.inference_network()
    with atomic_folder(folder) as tmp:
        RunWriter(tmp, metadata={"soup": plan.method}).write_evaluated(config, [record], network)
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
    notes: list[str] = []
    members, left_out = find_members(root, options.which, notes)
    for note in notes:
        echo(f"warning: not followed: {note}")
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
        for older in older_soups(out, plans):
            echo(f"warning: {older} is an older soup of the same runs under another name (an earlier dgmoe named "
                 "soups by their members); `dgmoe results` would list it beside the current one: delete it")
    evaluators: dict[tuple, Evaluator] = {}
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
            evaluators[key] = Evaluator(m.run, options.device, options.data_dir, options.eval_batch_size,
                                        options.num_workers)
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
    if not isinstance(info, dict) or not _finished(folder):
        return None
    keys = ("method", "members", "weights", "member_sha256", "left_out", "alphas")
    return {k: info[k] for k in keys} if all(k in info for k in keys) else {}


def _finished(folder: Path) -> bool:
    try:
        return read_done(folder) is not None
    except OSError:
        return False
