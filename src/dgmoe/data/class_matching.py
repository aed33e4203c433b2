"""The names a text head's prompts give a dataset's labels: the catalogue's declared class names
(`dgmoe.data.class_names`) matched to the class folders the loader found, in the loader's label order. The
prompt templates they go into are CLIP's (`dgmoe.models.clip.templates`)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from dgmoe.data.catalogue import DATASETS
from dgmoe.data.class_names import readable
from dgmoe.errors import UsageError


def normalised(name: str) -> str:
    """A class name as it is matched when it is not the declared one: case folded, `_`, `-` and runs of spaces
    as one space."""
    return " ".join(name.replace("_", " ").replace("-", " ").casefold().split())


@dataclass(frozen=True)
class ClassNames:
    """The names prompts give a dataset's labels, in the loader's label order (`names[i]` is label i's), and the
    class folders matched to a declared name only once normalised (`renamed`: (folder, declared name))."""

    names: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...] = ()

    def mapping(self) -> str:
        """'Dog -> dog, people_ -> people' for the info line a normalised match is said with."""
        return ", ".join(f"{folder} -> {name}" for folder, name in self.renamed)


def match_class_names(dataset: str, classes: Sequence[str]) -> ClassNames:
    """Each of the data's classes (label order: the sorted class folders) given the catalogue's declared name it
    is (`DatasetSpec.class_names`): the same name, or the same as a prompt says it (a folder's underscores as
    spaces), or failing that the same once `normalised` (case, `_`, `-`, spaces; listed in `renamed`). A
    dataset without declared names is prompted with its own, `readable`. A one-line `UsageError` names every
    class that is no declared name, or two that are the same one: the head would otherwise prompt label i with
    another class's name."""
    declared = DATASETS.get(dataset).class_names if dataset in DATASETS else ()
    if not declared:
        return ClassNames(tuple(readable(c) for c in classes))
    if len(declared) != len(classes):
        raise UsageError(f"{dataset}: the data has {len(classes)} classes but the catalogue names {len(declared)} "
                         "for its prompts; is the folder another version of the dataset?")
    exact = set(declared)
    loose: dict[str, list[str]] = {}
    for name in declared:
        loose.setdefault(normalised(name), []).append(name)
    names: list[str] = []
    renamed: list[tuple[str, str]] = []
    unknown: list[str] = []
    for c in classes:
        if c in exact or readable(c) in exact:
            names.append(c if c in exact else readable(c))
            continue
        found = loose.get(normalised(c), [])
        if len(found) != 1:
            unknown.append(c)
            continue
        names.append(found[0])
        renamed.append((c, found[0]))
    if unknown:
        unmatched = [n for n in declared if n not in names]
        listed = ", ".join(unmatched[:10]) + (", ..." if len(unmatched) > 10 else "")
        raise UsageError(f"{dataset}: class folder(s) {', '.join(repr(c) for c in unknown)} match none of the "
                         f"catalogue's class names, which a text head prompts with (unmatched: {listed}): rename "
                         "each folder to the class it holds")
    counts, declared_counts = Counter(names), Counter(declared)
    twice = sorted(n for n, k in counts.items() if k > declared_counts[n])
    if twice:
        folders = [c for c, n in zip(classes, names) if n in twice]
        raise UsageError(f"{dataset}: class folders {', '.join(repr(c) for c in folders)} are all the class "
                         f"{', '.join(repr(n) for n in twice)}: keep one folder per class")
    return ClassNames(tuple(names), tuple(renamed))


def prompt_class_names(dataset: str, classes: Sequence[str]) -> tuple[str, ...]:
    """The names prompts give the labels of `dataset` whose data has `classes` (label order): each class's
    declared name (`match_class_names`), else the data's own, each `readable`."""
    return match_class_names(dataset, classes).names
