"""Which soups `dgmoe soup` makes: one `Plan` per method and group of runs (`dgmoe.posthoc.soup` has the
methods' references), named so that a soup made again over other members or weights replaces the one made
before, with an identity that says when a soup folder must be made again."""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from dgmoe.errors import UsageError
from dgmoe.posthoc import wise_ft
from dgmoe.posthoc.config import METHODS
from dgmoe.posthoc.members import SOUP_KEY, LeftOut, Member, check_shared


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


def older_soups(out: Path, plans: Sequence[Plan]) -> list[Path]:
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
