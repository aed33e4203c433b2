"""The resume state of a run: everything that makes a killed run continue exactly where it left off
(weights, optimiser and algorithm state, torch and numpy RNG, records so far, best validation), and the
identity of the run it belongs to, so that a state copied into another run's folder is refused."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping

import torch
import torch.nn as nn

from dgmoe.engine.checkpoint import load_resume_state
from dgmoe.engine.config import RunConfig, identity_differences
from dgmoe.errors import UsageError
from dgmoe.models.peft import base_of, peft_of, trainable_names
from dgmoe.seeding import numpy_rng_state, set_numpy_rng_state
from dgmoe.settings import ConfigError


@dataclass
class RunState:
    """Where a run stands: the next step to train, the records so far and the best training-domain
    validation accuracy seen (the `best.safetensors` criterion)."""

    next_step: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    best_val: float = -1.0


def base_weight_keys(algorithm: nn.Module) -> tuple[set[str], list[dict[str, str]]]:
    """The frozen base weights a resume state leaves out (the parameters of parameter-efficient networks built
    from a pretrained file that they do not train, in the algorithm and in its copies such as SWAD's average:
    the run rebuilds them from that file, checked by its sha256), and the bases they come from."""
    keys, bases = set(), []
    for prefix, module in algorithm.named_modules():
        config, base = peft_of(module), base_of(module)
        if config is None or not config.active or not isinstance(base, dict) or not base.get("base_pretrained"):
            continue
        keep, at = set(trainable_names(module)), f"{prefix}." if prefix else ""
        keys |= {at + name for name, _ in module.named_parameters() if name not in keep}
        bases.append(base)
    return keys, bases


def capture(step: int, algorithm, progress: RunState, identity: Mapping[str, Any] | None = None,
            compiled: bool = False) -> dict[str, Any]:
    """The resume state after `step` (tensors and plain types only: loaded with `weights_only=True`);
    `identity` is the run's (`RunConfig.identity()` with its schedule resolved); `compiled` whether it trained
    under `--compile` (which rounds differently: `load_checked` refuses the other setting). A parameter-efficient
    run's leaves its frozen base weights out and names them (`base_weight_keys`)."""
    frozen, bases = base_weight_keys(algorithm)
    weights = {k: v for k, v in algorithm.state_dict().items() if k not in frozen}
    return {"step": step, "algorithm": weights, "peft_bases": bases, "records": progress.records,
            "best_val": progress.best_val,
            "optimizers": {k: o.state_dict() for k, o in dict(algorithm.optimizers()).items()},
            "rng": torch.get_rng_state(), "numpy_rng": numpy_rng_state(),
            "identity": dict(identity or {}), "compiled": compiled}


def _foreign(path: Path, why: str) -> UsageError:
    return UsageError(f"{path} belongs to another run ({why}); it was left untouched: move it back to its own "
                      "run folder, or delete it to train this run from its start")


def load_checked(path: Path, identity: Mapping[str, Any], schedules: Collection[int], algorithm,
                 compiled: bool | None = None) -> dict[str, Any]:
    """The resume state at `path`, refused (`UsageError`, nothing changed) unless it belongs to this run: the
    same identity, with a step count among `schedules` (the run's, and those `--extend` lengthened), and trained
    with the same `--compile` (`compiled`; None: not checked), whose graphs round differently from eager
    kernels, so that a resumed run ends exactly as the uninterrupted one. A state written before states carried
    their identity must at least fit the algorithm's tensors."""
    state = load_resume_state(path)
    if not isinstance(state, dict) or "algorithm" not in state or "step" not in state:
        raise UsageError(f"{path} is not a dgmoe resume state; delete it to train this run from its start")
    if compiled is not None and "compiled" in state and bool(state["compiled"]) != compiled:
        was = "with" if state["compiled"] else "without"
        raise UsageError(f"{path} was trained {was} --compile, whose rounding differs from this command's; run "
                         f"the command {was} --compile to resume it exactly, or delete resume.pt to train the run "
                         "from its start")
    saved = state.get("identity")
    if saved:
        try:
            theirs = RunConfig.from_dict({k: v for k, v in saved.items() if k != RunConfig.EXECUTION}, strict=False)
        except (ConfigError, TypeError) as e:
            raise _foreign(path, f"an unreadable identity: {e}") from None
        ours = RunConfig.from_dict(dict(identity), strict=False)
        diff = [k for k in identity_differences(theirs, ours) if k != "steps"]
        if diff:
            raise _foreign(path, f"differs in: {', '.join(diff)}")
        if theirs.training.steps not in schedules:
            raise _foreign(path, f"a schedule of {theirs.training.steps} steps, this run's are "
                                 f"{', '.join(map(str, sorted(schedules)))}")
        check_bases(state, algorithm)
        return state
    mine = algorithm.state_dict()
    theirs_shapes = {k: tuple(v.shape) for k, v in state["algorithm"].items() if isinstance(v, torch.Tensor)}
    mismatch = sorted(set(mine) ^ set(theirs_shapes)) or sorted(
        k for k, v in mine.items() if isinstance(v, torch.Tensor) and tuple(v.shape) != theirs_shapes[k])
    if mismatch:
        raise _foreign(path, f"its weights do not fit this model: {mismatch[0]}"
                             + (f" and {len(mismatch) - 1} more" if len(mismatch) > 1 else ""))
    check_bases(state, algorithm)
    return state


def check_bases(state: Mapping[str, Any], algorithm) -> None:
    """Refuse a resume state whose frozen base weights (left out of it) are not those the algorithm was built
    with: it names the path and the SHA-256 the state needs, and the file's."""
    frozen, bases = base_weight_keys(algorithm)
    expected = [b.get("base_sha256") for b in state.get("peft_bases", [])]
    if frozen and expected != [b["base_sha256"] for b in bases]:
        k = next((i for i, b in enumerate(bases) if i >= len(expected) or expected[i] != b["base_sha256"]), 0)
        want = expected[k] if k < len(expected) else "none recorded"
        raise UsageError(f"the resume state was trained from base weights with sha256 {want}, but "
                         f"{bases[k]['base_pretrained']} has sha256 {bases[k]['base_sha256']}; put the file with "
                         f"sha256 {want} back at that path, or delete resume.pt to train the run from its start")


def restore(state: Mapping[str, Any], algorithm) -> RunState:
    """Load a resume state (`load_checked`'s) into `algorithm` and the RNGs; return where the run stands. The
    frozen base weights a parameter-efficient run's state leaves out must be those the algorithm was built with."""
    check_bases(state, algorithm)
    frozen, _ = base_weight_keys(algorithm)
    missing, unexpected = algorithm.load_state_dict(state["algorithm"], strict=not frozen)
    if set(missing) != (frozen if "peft_bases" in state else set()) or unexpected:
        odd = sorted(set(missing) ^ frozen) + sorted(unexpected)
        raise UsageError(f"the resume state does not fit this run's weights ({odd[0]}); delete resume.pt to train "
                         "this run from its start")
    for name, opt in dict(algorithm.optimizers()).items():
        opt.load_state_dict(state["optimizers"][name])
    torch.set_rng_state(state["rng"])
    if "numpy_rng" in state:  # runs saved before dgmoe drew from numpy have none
        set_numpy_rng_state(state["numpy_rng"])
    return RunState(state["step"] + 1, list(state["records"]), state["best_val"])
