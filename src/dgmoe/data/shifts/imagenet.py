"""ImageNet and its natural distribution shifts as one dataset: trained on ImageNet, every shift evaluated from
the same run (the evaluation of WiSE-FT, Wortsman et al., CVPR 2022, Table 1, and FLYP, Goyal et al., CVPR
2023, Table 1; the shifts of Taori et al., NeurIPS 2020).

Layout under `--data-dir` (the folders the datasets' own archives unpack to, as mlfoundations/wise-ft's
datasets.md lays them out):

    imagenet/train/<wnid>/<image>                              ImageNet               (training domain)
    imagenet/val/<wnid>/<image>                                ImageNet-val           (in-distribution test)
    imagenetv2-matched-frequency-format-val/<index>/<image>    ImageNet-V2            (Recht et al., ICML 2019)
    imagenet-r/<wnid>/<image>                                  ImageNet-R, 200 classes (Hendrycks et al., ICCV 2021)
    sketch/<wnid>/<image>                                      ImageNet-Sketch        (Wang et al., NeurIPS 2019)
    imagenet-a/<wnid>/<image>                                  ImageNet-A, 200 classes (Hendrycks et al., CVPR 2021)
    objectnet-1.0/images/<folder>/<image>                      ObjectNet, 113 classes (Barbu et al., NeurIPS 2019)

Classes are the 1,000 ImageNet classes in WordNet-id order (class names: CLIP's, as open_clip ships them).
ImageNet-R and -A are labelled in their 200 classes and ObjectNet in the 113 classes that overlap ImageNet
(its other 200 folders are left out, as wise-ft does); each is scored on the network's logits projected onto
its classes (`dgmoe.data.base.ClassMap`: a class's logit is the largest of its ImageNet classes' logits).
ObjectNet images lose the 2-pixel border of every side before resizing (wise-ft's `crop`). The class facts are
data, `imagenet_classes.json`, written from the public sources by tests/parity/record_imagenet_shift_classes.py.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

from dgmoe.data.base import ClassMap
from dgmoe.data.errors import DataDirNotFoundError, EmptyDomainError, LayoutError
from dgmoe.data.folder import IMG_EXTENSIONS, FolderDomain, subsample_indices
from dgmoe.data.images import read_rgb
from dgmoe.seeding import seed_hash

CLASSES_FILE = Path(__file__).with_name("imagenet_classes.json")
OBJECTNET_BORDER = 2


@lru_cache(maxsize=1)
def class_facts() -> dict:
    """The ImageNet-shift class facts (see the module docstring)."""
    return json.loads(CLASSES_FILE.read_text())


@dataclass(frozen=True)
class Shift:
    """One domain of the suite: its folder under `--data-dir`, how its class folders are named ("wnid",
    "index" for ImageNet-V2's 0..999, "objectnet" for ObjectNet's folder names) and the ImageNet classes of
    its own classes (`None`: all 1,000)."""

    domain: str
    folder: str
    naming: str = "wnid"
    classes: str | None = None  # key of class_facts() listing its classes: "imagenet_r", "imagenet_a", "objectnet"

    def groups(self) -> tuple[tuple[int, ...], ...] | None:
        if self.classes is None:
            return None
        facts = class_facts()[self.classes]
        return tuple(tuple(c["imagenet"]) if isinstance(c, dict) else (int(c),) for c in facts)

    def folder_labels(self) -> dict[str, int]:
        """Class folder name -> the domain's label."""
        facts = class_facts()
        if self.naming == "index":
            return {str(i): i for i in range(len(facts["wnids"]))}
        if self.naming == "objectnet":
            return {c["folder"]: k for k, c in enumerate(facts["objectnet"])}
        if self.classes is not None:
            return {facts["wnids"][i]: k for k, i in enumerate(facts[self.classes])}
        return {w: i for i, w in enumerate(facts["wnids"])}


IMAGENET_SHIFTS = (
    Shift("ImageNet", "imagenet/train"),
    Shift("ImageNet-val", "imagenet/val"),
    Shift("ImageNet-V2", "imagenetv2-matched-frequency-format-val", naming="index"),
    Shift("ImageNet-R", "imagenet-r", classes="imagenet_r"),
    Shift("ImageNet-Sketch", "sketch"),
    Shift("ImageNet-A", "imagenet-a", classes="imagenet_a"),
    Shift("ObjectNet", "objectnet-1.0/images", naming="objectnet", classes="objectnet"),
)
#: the in-distribution test domain and the shifts the suite's table reports
ID_DOMAIN = "ImageNet-val"
SHIFT_DOMAINS = tuple(s.domain for s in IMAGENET_SHIFTS[2:])


def class_maps() -> tuple[tuple[str, ClassMap], ...]:
    return tuple((s.domain, ClassMap(g)) for s in IMAGENET_SHIFTS if (g := s.groups()) is not None)


class BorderCroppedDomain(FolderDomain):
    """A lazily decoded domain whose images lose `border` pixels on every side before the square resize."""

    def __init__(self, paths, labels, img_size: int, border: int):
        super().__init__(paths, labels, img_size)
        self.border = border

    def _decode(self, path: str) -> np.ndarray:
        arr = read_rgb(path, None)[:, self.border:-self.border or None, self.border:-self.border or None]
        im = Image.fromarray(np.ascontiguousarray(arr.transpose(1, 2, 0)))
        if im.size != (self.img_size, self.img_size):
            im = im.resize((self.img_size, self.img_size), Image.Resampling.BILINEAR)
        return np.array(im, dtype=np.uint8).transpose(2, 0, 1)

    def __getitem__(self, index: int):
        return torch.from_numpy(self._decode(self.paths[index])), int(self.labels[index])

    def gather(self, indices):
        idx = torch.as_tensor(indices, dtype=torch.long)
        x = torch.from_numpy(np.stack([self._decode(self.paths[i]) for i in idx.tolist()])) if len(idx) else \
            torch.zeros((0, 3, self.img_size, self.img_size), dtype=torch.uint8)
        return x, self.labels[idx], None


def _listing(root: Path, shift: Shift) -> tuple[list[str], list[int]]:
    """The images of one domain folder (sorted class folders, sorted files) and their labels; folders outside
    the domain's classes are refused, except ObjectNet's 200 classes that ImageNet lacks."""
    labels_of = shift.folder_labels()
    paths: list[str] = []
    labels: list[int] = []
    for name in sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")):
        if name not in labels_of:
            if shift.naming == "objectnet":
                continue
            raise LayoutError(f"{shift.domain}: {root / name} is not one of its class folders "
                              f"({'0..999' if shift.naming == 'index' else 'ImageNet WordNet ids, e.g. n01440764'})")
        files = sorted(f for f in os.listdir(root / name) if f.lower().endswith(IMG_EXTENSIONS)
                       and not f.startswith("."))
        paths += [str(root / name / f) for f in files]
        labels += [labels_of[name]] * len(files)
    if not paths:
        raise EmptyDomainError(f"{shift.domain}: no images under {root}/<class>/")
    return paths, labels


def builder(shifts: tuple[Shift, ...], name: str) -> Callable[..., tuple[list[FolderDomain], tuple[str, ...], str]]:
    """The catalogue builder: `(data_dir, img_size, n_per_domain, seed)` -> (domains, class names, description);
    every folder missing is named at once, before any image is read."""
    def build(data_dir, img_size: int, n_per_domain: int | None, seed: int):
        if data_dir is None:
            raise DataDirNotFoundError(f"{name} needs --data-dir, the folder holding "
                                       + ", ".join(f"{s.folder}/" for s in shifts))
        data_dir = Path(data_dir).expanduser()
        missing = [f"{s.folder}/ ({s.domain})" for s in shifts if not (data_dir / s.folder).is_dir()]
        if missing:
            raise DataDirNotFoundError(f"{name}: {data_dir} lacks {', '.join(missing)} (layout: "
                                       "dgmoe.data.shifts.imagenet)")
        domains: list[FolderDomain] = []
        for d, shift in enumerate(shifts):
            paths, labels = _listing(data_dir / shift.folder, shift)
            keep = subsample_indices(len(paths), n_per_domain, seed_hash("subsample", name, d, seed))
            args = ([paths[i] for i in keep], [labels[i] for i in keep], img_size)
            domains.append(BorderCroppedDomain(*args, OBJECTNET_BORDER) if shift.naming == "objectnet"
                           else FolderDomain(*args))
        return domains, tuple(class_facts()["names"]), f"{name} from {data_dir}, decoded per item"
    return build
