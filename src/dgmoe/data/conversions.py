"""Layout conversions a download source names (`Source.convert`): from the files a source publishes to
dgmoe's `<domain>/<class>/<image>` folder, in place in the folder being installed.

- `terra_incognita`: DomainBed's conversion of the Caltech Camera Traps release (`images/` holding
  `eccv_18_all_images_sm/<file>`, `labels/` holding the one annotation JSON): every image of locations 38, 43,
  46 and 100 goes to `location_<id>/<category>/<file>` for each of its annotations whose category is one of
  DomainBed's ten; the rest, and the two source folders, are dropped.
"""
from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Callable

from dgmoe.data.errors import LayoutError

TERRA_LOCATIONS = ("38", "46", "100", "43")
TERRA_CATEGORIES = ("bird", "bobcat", "cat", "coyote", "dog", "empty", "opossum", "rabbit", "raccoon", "squirrel")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def terra_incognita(tree: Path) -> None:
    """DomainBed's TerraIncognita conversion (see the module docstring), in place under `tree`."""
    images = tree / "images"
    images = images / "eccv_18_all_images_sm" if (images / "eccv_18_all_images_sm").is_dir() else images
    labels = sorted((tree / "labels").rglob("*.json")) if (tree / "labels").is_dir() else []
    if not images.is_dir() or len(labels) != 1:
        raise LayoutError(f"TerraIncognita: expected images/eccv_18_all_images_sm/ and one annotation JSON under "
                          f"labels/ in {tree}, found {len(labels)} JSON file(s)")
    data = json.loads(labels[0].read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    by_image: dict[object, list[str]] = defaultdict(list)
    for annotation in data["annotations"]:
        by_image[annotation["image_id"]].append(names[annotation["category_id"]])
    for image in data["images"]:
        location = str(image["location"])
        if location not in TERRA_LOCATIONS:
            continue
        for category in by_image.get(image["id"], []):
            if category not in TERRA_CATEGORIES:
                continue
            src = images / image["file_name"]
            if not src.is_file():
                raise LayoutError(f"TerraIncognita: the annotations name {image['file_name']}, which the image "
                                  f"archive lacks")
            dst = tree / f"location_{location}" / category / image["file_name"]
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                _link_or_copy(src, dst)
    shutil.rmtree(tree / "images")
    shutil.rmtree(tree / "labels")


CONVERSIONS: dict[str, Callable[[Path], None]] = {"terra_incognita": terra_incognita}
