"""Prompt templates for CLIP's zero-shot and text-initialised heads: a template is a `str.format` pattern with one
`{}` for the class name (`dgmoe.data.class_names`).

- `openai_imagenet`: the 80 ImageNet templates of CLIP's prompt ensemble (Radford et al., ICML 2021, §3.1.4;
  OpenAI's `Prompt_Engineering_for_ImageNet.ipynb`, the list open_clip ships as `OPENAI_IMAGENET_TEMPLATES`);
- `domainbed`: CLIP's default single prompt "A photo of a {label}." (Radford et al., §3.1.4), the prompt of the
  DomainBed zero-shot rows;
- a file: one template per line (blank lines and lines starting with '#' skipped), each with one `{}`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dgmoe.data.catalogue import DATASETS
from dgmoe.data.class_names import readable
from dgmoe.errors import UsageError

OPENAI_IMAGENET = (
    'a bad photo of a {}.', 'a photo of many {}.', 'a sculpture of a {}.', 'a photo of the hard to see {}.',
    'a low resolution photo of the {}.', 'a rendering of a {}.', 'graffiti of a {}.', 'a bad photo of the {}.',
    'a cropped photo of the {}.', 'a tattoo of a {}.', 'the embroidered {}.', 'a photo of a hard to see {}.',
    'a bright photo of a {}.', 'a photo of a clean {}.', 'a photo of a dirty {}.', 'a dark photo of the {}.',
    'a drawing of a {}.', 'a photo of my {}.', 'the plastic {}.', 'a photo of the cool {}.',
    'a close-up photo of a {}.', 'a black and white photo of the {}.', 'a painting of the {}.',
    'a painting of a {}.', 'a pixelated photo of the {}.', 'a sculpture of the {}.', 'a bright photo of the {}.',
    'a cropped photo of a {}.', 'a plastic {}.', 'a photo of the dirty {}.', 'a jpeg corrupted photo of a {}.',
    'a blurry photo of the {}.', 'a photo of the {}.', 'a good photo of the {}.', 'a rendering of the {}.',
    'a {} in a video game.', 'a photo of one {}.', 'a doodle of a {}.', 'a close-up photo of the {}.',
    'a photo of a {}.', 'the origami {}.', 'the {} in a video game.', 'a sketch of a {}.', 'a doodle of the {}.',
    'a origami {}.', 'a low resolution photo of a {}.', 'the toy {}.', 'a rendition of the {}.',
    'a photo of the clean {}.', 'a photo of a large {}.', 'a rendition of a {}.', 'a photo of a nice {}.',
    'a photo of a weird {}.', 'a blurry photo of a {}.', 'a cartoon {}.', 'art of a {}.', 'a sketch of the {}.',
    'a embroidered {}.', 'a pixelated photo of a {}.', 'itap of the {}.', 'a jpeg corrupted photo of the {}.',
    'a good photo of a {}.', 'a plushie {}.', 'a photo of the nice {}.', 'a photo of the small {}.',
    'a photo of the weird {}.', 'the cartoon {}.', 'art of the {}.', 'a drawing of the {}.',
    'a photo of the large {}.', 'a black and white photo of a {}.', 'the plushie {}.', 'a dark photo of a {}.',
    'itap of a {}.', 'graffiti of the {}.', 'a toy {}.', 'itap of my {}.', 'a photo of a cool {}.',
    'a photo of a small {}.', 'a tattoo of the {}.',
)
DOMAINBED = ("a photo of a {}.",)
TEMPLATE_SETS: dict[str, tuple[str, ...]] = {"openai_imagenet": OPENAI_IMAGENET, "domainbed": DOMAINBED}


def _check(template: str, where: str) -> str:
    if template.count("{}") != 1 or template.replace("{}", "").count("{") or template.replace("{}", "").count("}"):
        raise UsageError(f"{where}: a template needs exactly one {{}} for the class name (and no other braces), "
                         f"got {template!r}")
    return template


def templates(source: str) -> tuple[str, ...]:
    """The templates of a set name (`TEMPLATE_SETS`) or of a file, one per line; a one-line `UsageError` names a
    missing file or a template without exactly one `{}`."""
    if source in TEMPLATE_SETS:
        return TEMPLATE_SETS[source]
    path = Path(source)
    if not path.is_file():
        raise UsageError(f"--prompt-templates {source}: neither a template set ({', '.join(TEMPLATE_SETS)}) nor a file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--prompt-templates {source}: cannot read it as UTF-8 text ({type(e).__name__})") from None
    found = tuple(_check(line.strip(), f"--prompt-templates {source}:{n}") for n, line in enumerate(lines, 1)
                  if line.strip() and not line.lstrip().startswith("#"))
    if not found:
        raise UsageError(f"--prompt-templates {source}: no template in the file (one per line, each with one {{}})")
    return found


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
