"""Stand-in folders of the ImageNet-shift suite for the recipes' smoke scale: every folder of the suite in its
published layout (`dgmoe.data.shifts.imagenet.IMAGENET_SHIFTS`: ImageNet's train and val, V2's class-index
folders, R's and A's 200-class subsets, Sketch, ObjectNet's own folder names), holding a few seeded random PNGs of
a handful of classes, so that a CPU run trains on "ImageNet" and evaluates every shift through the real loader,
class maps and projections. The pixels carry no signal: accuracies check the pipeline, nothing else."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from dgmoe.atomic import write_bytes_atomic, write_text_atomic
from dgmoe.data.shifts.imagenet import IMAGENET_SHIFTS, Shift, class_facts

#: how many classes of each domain the stand-in holds (ImageNet-R's and -A's: classes of both subsets)
N_CLASSES = 3
#: ObjectNet's images lose a border before the resize, so they are written larger
OBJECTNET_SIZE = 12
DONE = ".stand_in_done"


def stand_in_classes() -> tuple[int, ...]:
    """The ImageNet classes the stand-in holds: the first that both ImageNet-R and ImageNet-A have, so that every
    domain but ObjectNet holds the same classes."""
    facts = class_facts()
    return tuple(sorted(set(facts["imagenet_r"]) & set(facts["imagenet_a"]))[:N_CLASSES])


def _folders(shift: Shift, classes: tuple[int, ...]) -> list[str]:
    """The class folders of `shift` the stand-in writes."""
    if shift.naming == "objectnet":
        return [c["folder"] for c in class_facts()["objectnet"][:N_CLASSES]]
    if shift.naming == "index":
        return [str(c) for c in classes]
    return [class_facts()["wnids"][c] for c in classes]


def write_imagenet_shifts(root: str | Path, per_class: int = 4, size: int = 8, seed: int = 0) -> bool:
    """Write the stand-in under `root` unless it is complete there (a marker file written last); True if
    written. The same pixels every time for a `seed`."""
    from PIL import Image

    root = Path(root)
    if (root / DONE).is_file():
        return False
    rng = np.random.RandomState(seed)
    classes = stand_in_classes()
    for shift in IMAGENET_SHIFTS:
        side = OBJECTNET_SIZE if shift.naming == "objectnet" else size
        for folder in _folders(shift, classes):
            target = root / shift.folder / folder
            target.mkdir(parents=True, exist_ok=True)
            for j in range(per_class):
                pixels = rng.randint(0, 256, (side, side, 3)).astype(np.uint8)
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, "PNG")
                write_bytes_atomic(target / f"img{j}.png", buffer.getvalue())
    write_text_atomic(root / DONE, "")
    return True
