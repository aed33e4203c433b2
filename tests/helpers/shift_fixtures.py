"""Tiny stand-ins for the distribution-shift suites in their published folder layouts, written by the tests:
ImageNet (train, val) with V2, R, Sketch, A and ObjectNet (`write_imagenet_shifts`), and DomainBed-OOP's
`hard/` split beside a tiny PACS (`write_pacs_oop`). A few 8 x 8 PNGs per class; nothing is downloaded."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

FACTS = json.loads((Path(__file__).resolve().parents[2] / "src" / "dgmoe" / "data" / "shifts"
                    / "imagenet_classes.json").read_text())
#: ImageNet classes of the stand-in: in R, in A, in both, in neither, and the two of ObjectNet's 'Alarm clock'
IMAGENET_CLASSES = (1, 6, 11, 3, 409, 530)


def _png(path: Path, value: int, size: int = 8) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(value)
    Image.fromarray(rng.randint(0, 256, (size, size, 3)).astype(np.uint8)).save(path)


def write_imagenet_shifts(data_dir: Path, per_class: int = 2) -> dict[str, list[tuple[str, int]]]:
    """Every folder of the suite with `per_class` images of each stand-in class it has; returns, per domain,
    (relative path, expected label) of every image (ObjectNet: its label among the 113 classes)."""
    wnids = FACTS["wnids"]
    written: dict[str, list[tuple[str, int]]] = {}
    k = 0

    def put(domain: str, folder: str, cls: str, label: int, size: int = 8) -> None:
        nonlocal k
        for j in range(per_class):
            rel = f"{folder}/{cls}/img{j}.png"
            _png(data_dir / rel, k, size)
            written.setdefault(domain, []).append((rel, label))
            k += 1

    for c in IMAGENET_CLASSES:
        put("ImageNet", "imagenet/train", wnids[c], c)
        put("ImageNet-val", "imagenet/val", wnids[c], c)
        put("ImageNet-V2", "imagenetv2-matched-frequency-format-val", str(c), c)
        put("ImageNet-Sketch", "sketch", wnids[c], c)
        for domain, folder, key in (("ImageNet-R", "imagenet-r", "imagenet_r"), ("ImageNet-A", "imagenet-a",
                                                                                  "imagenet_a")):
            if c in FACTS[key]:
                put(domain, folder, wnids[c], FACTS[key].index(c))
    objectnet = FACTS["objectnet"]
    for label in (0, 1):  # alarm_clock (ImageNet 409, 530), backpack
        put("ObjectNet", "objectnet-1.0/images", objectnet[label]["folder"], label, size=12)
    _png(data_dir / "objectnet-1.0/images/not_in_imagenet/x.png", 999)  # one of ObjectNet's other 200 classes
    return written


PACS_DOMAINS = ("art_painting", "cartoon", "photo", "sketch")
PACS_CLASSES = ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")


def write_pacs_oop(data_dir: Path, per_class: int = 2) -> set[str]:
    """A tiny PACS and DomainBed-OOP's `hard/PACS` holding its first image of every class of every domain;
    returns the OOP images as `<domain>/<class>/<file>`."""
    oop = set()
    k = 0
    for domain in PACS_DOMAINS:
        for cls in PACS_CLASSES:
            for j in range(per_class):
                rel = f"{domain}/{cls}/{j}.png"
                _png(data_dir / "PACS" / rel, k)
                if j == 0:
                    _png(data_dir / "DomainBed_OOP/hard/PACS" / rel, k)
                    oop.add(rel)
                k += 1
    return oop
