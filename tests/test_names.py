"""The names `dgmoe train` checks before torch starts (`dgmoe.names`) are the registries' names: one fact, declared
by the registries and derived here. On a difference the test fails naming it; `DGMOE_UPDATE_NAMES=1` rewrites
the derived block of src/dgmoe/names.py from the registries (then read the diff)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import dgmoe.names as names
from dgmoe.algorithms import ALGORITHMS
from dgmoe.data.catalogue import DATASETS
from dgmoe.models import MODELS
from dgmoe.models.foundation import TOWERS
from dgmoe.models.info import describe_model

BEGIN = "# --- derived from the registries by tests/test_names.py (DGMOE_UPDATE_NAMES=1); do not edit by hand ---\n"
END = "# --- end of the derived block ---\n"


def derived() -> dict:
    from dgmoe.models.clip.text_tower import TEXT_CONFIGS

    towers = {name: tower[0] for name in MODELS.names() if (tower := describe_model(name).tower) is not None}
    return {"MODEL_NAMES": tuple(MODELS.names()), "ALGORITHM_NAMES": tuple(ALGORITHMS.names()),
            "DATASET_DOMAINS": {n: (tuple(DATASETS.get(n).domains), tuple(DATASETS.get(n).eval_domains))
                                for n in DATASETS.names()},
            "TEXT_TOWER_MODELS": tuple(n for n, tower in towers.items() if tower in TEXT_CONFIGS),
            "MODEL_TOWERS": towers,
            "TOWER_WEIGHTS": {label: TOWERS[label].weights for label in sorted(set(towers.values()))}}


def _block(values: dict) -> str:
    def wrap(items: list[str], indent: str) -> str:
        lines, line = [], indent
        for item in items:
            if len(line) + len(item) + 1 > 118 and line.strip():
                lines.append(line.rstrip())
                line = indent
            line += item + " "
        return "\n".join([*lines, line.rstrip()])

    models = wrap([f"{n!r}," for n in values["MODEL_NAMES"]], "    ")
    algorithms = wrap([f"{n!r}," for n in values["ALGORITHM_NAMES"]], "    ")
    datasets = "\n".join(f"    {n!r}: ({d!r}, {e!r})," if len(f"    {n!r}: ({d!r}, {e!r}),") <= 120 else
                         f"    {n!r}: (\n{wrap([f'{x!r},' for x in d], '        ')}\n    ), {e!r}),".replace(
                             "(\n", "((\n").replace("\n    ), ", "\n    ), ")
                         for n, (d, e) in values["DATASET_DOMAINS"].items())
    comment = "#: catalogue dataset -> (its domains, () when the folder names them; its evaluation-only domains)"
    text_towers = wrap([f"{n!r}," for n in values["TEXT_TOWER_MODELS"]], "    ")
    tower_comment = "#: the CLIP image towers, which have a text tower for `--head zeroshot`"
    towers = "\n".join(f"    {n!r}: {t!r}," for n, t in values["MODEL_TOWERS"].items())
    weights = "\n".join(f"    {t!r}: (\n{wrap_text(w, '        ')}\n    )," for t, w in values["TOWER_WEIGHTS"].items())
    return (f"{BEGIN}MODEL_NAMES: tuple[str, ...] = (\n{models}\n)\nALGORITHM_NAMES: tuple[str, ...] = (\n"
            f"{algorithms}\n)\n{comment}\n"
            f"DATASET_DOMAINS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {{\n{datasets}\n}}\n"
            f"#: model -> the foundation tower it is built on (`dgmoe.models.foundation.Tower.label`)\n"
            f"MODEL_TOWERS: dict[str, str] = {{\n{towers}\n}}\n"
            f"#: tower -> how to get its weights as a local file (`dgmoe.models.foundation.Tower.weights`)\n"
            f"TOWER_WEIGHTS: dict[str, str] = {{\n{weights}\n}}\n"
            f"{tower_comment}\nTEXT_TOWER_MODELS: tuple[str, ...] = (\n{text_towers}\n)\n{END}")


def wrap_text(text: str, indent: str) -> str:
    """`text` as adjacent string literals of at most 120 characters a line."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(indent) + len(repr(line + " " + word)) > 119:
            lines.append(indent + repr(line + " "))
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, indent + repr(line)])


def test_the_light_names_are_the_registries():
    want = derived()
    if os.environ.get("DGMOE_UPDATE_NAMES"):
        path = Path(names.__file__)
        text = path.read_text()
        path.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: _block(want), text, flags=re.S))
        return
    for key, value in want.items():
        assert getattr(names, key) == value, (
            f"dgmoe.names.{key} differs from the registry; rewrite it with DGMOE_UPDATE_NAMES=1 python -m pytest "
            "tests/test_names.py")
