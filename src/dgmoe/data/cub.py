"""CUB-DG (GMoE §5.4, App. D; SF-MoE §3): CUB-200-2011 birds in four styles, with part and attribute labels.

No public copy of CUB-DG exists (GMoE issue #3), so dgmoe defines the layout. Extract CUB_200_2011.tgz
into `<data_dir>` (it gives `CUB_200_2011/` with the annotation files and `attributes.txt` beside it),
stylise its images yourself and put the four domains in the catalogue's folder layout (dataset `CUBDG`)::

    <data_dir>/
        attributes.txt                       (or CUB_200_2011/attributes/attributes.txt)
        CUB_200_2011/
            images.txt  classes.txt  image_class_labels.txt  train_test_split.txt  bounding_boxes.txt
            parts/parts.txt  parts/part_locs.txt  attributes/image_attribute_labels.txt
        CUB_DG/
            Natural/<class_dir>/<image>      the original CUB_200_2011/images tree (a symlink is fine)
            Candy/<class_dir>/<image>        the same relative paths, stylised
            Mosaic/<class_dir>/<image>
            Udnie/<class_dir>/<image>

`CUB_DG/` holds only the domain folders, so `get_dataset("CUBDG", data_dir)` trains on it like any folder
dataset; the annotation folder can also be given explicitly (`annotations_dir`). A stylised file may use
another image extension than the original (the stem must match). Annotation formats are CUB-200-2011's:
`images.txt` "<image_id> <class_dir>/<file>", `image_class_labels.txt` "<image_id> <class_id>" (1-based),
`train_test_split.txt` "<image_id> <is_train>", `bounding_boxes.txt` "<image_id> <x> <y> <w> <h>",
`parts/parts.txt` "<part_id> <name with spaces>", `parts/part_locs.txt` "<image_id> <part_id> <x> <y> <visible>",
`attributes.txt` "<attribute_id> <category>::<value>", `image_attribute_labels.txt`
"<image_id> <attribute_id> <is_present> <certainty_id> <time>" (extra trailing fields are ignored).

Part locations and boxes are in pixels of the original (Natural) image; `CUBDG.normalized_parts` divides by
that image's size, which keeps them valid for any stylised copy resized to any square input. Domains are
the sorted domain folder names, as for every folder dataset in dgmoe (Candy, Mosaic, Natural, Udnie).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch.utils.data import Dataset

from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.errors import DataDirNotFoundError, LayoutError
from dgmoe.data.folder import IMG_EXTENSIONS, decode_image

CUB_DG_DIR = "CUB_DG"
CUB_ANNOTATIONS_DIR = "CUB_200_2011"
CUB_DG_DOMAINS = ("Candy", "Mosaic", "Natural", "Udnie")
REFERENCE_DOMAIN = "Natural"


def _table(path: Path, names: Sequence[str], what: str) -> pd.DataFrame:
    if not path.is_file():
        raise LayoutError(f"missing CUB annotation file {path} ({what})")
    try:
        frame = pd.read_csv(path, sep=r"\s+", header=None, names=list(names), usecols=range(len(names)),
                            engine="c", index_col=False)
    except (ValueError, pd.errors.ParserError) as e:
        raise LayoutError(f"cannot parse {path} as '{' '.join(f'<{n}>' for n in names)}': {e}") from None
    if frame.isna().any().any():
        bad = int(frame.isna().any(axis=1).to_numpy().argmax()) + 1
        raise LayoutError(f"{path} line {bad}: expected {len(names)} fields {' '.join(names)}")
    return frame


def _id_names(path: Path, what: str) -> list[tuple[int, str]]:
    """Lines "<id> <text that may contain spaces>"."""
    if not path.is_file():
        raise LayoutError(f"missing CUB annotation file {path} ({what})")
    out = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        head, _, rest = line.strip().partition(" ")
        if not head.isdigit() or not rest.strip():
            raise LayoutError(f"{path} line {lineno}: expected '<id> <name>', got {line!r}")
        out.append((int(head), rest.strip()))
    return out


@dataclass(frozen=True)
class CUBAnnotations:
    """CUB-200-2011 annotations, one row per image in `image_ids` order (ascending)."""

    image_ids: tuple[int, ...]
    paths: tuple[str, ...]             # "<class_dir>/<file>" relative to a domain folder
    labels: torch.Tensor               # [N] long, 0-based class index
    classes: tuple[str, ...]
    is_train: torch.Tensor             # [N] bool (the official split)
    boxes: torch.Tensor                # [N, 4] float (x, y, w, h) in original pixels
    part_names: tuple[str, ...]
    part_xy: torch.Tensor              # [N, P, 2] float (x, y) in original pixels
    part_visible: torch.Tensor         # [N, P] bool
    attribute_names: tuple[str, ...]   # "has_bill_shape::dagger", ...; empty when not loaded
    attributes: torch.Tensor | None    # [N, A] bool (is_present) or None

    def __len__(self) -> int:
        return len(self.image_ids)


def find_annotation_root(root: Path) -> Path:
    for cand in (root, root / "CUB_200_2011"):
        if (cand / "images.txt").is_file():
            return cand
    raise LayoutError(f"no images.txt in {root} or {root / 'CUB_200_2011'}: expected the CUB-200-2011 annotation "
                      f"files there (see dgmoe.data.cub for the CUB-DG layout)")


def read_cub_annotations(root: str | Path, with_attributes: bool = True) -> CUBAnnotations:
    """Parse the CUB-200-2011 annotation files under `root` (or `root/CUB_200_2011`)."""
    ann = find_annotation_root(Path(root))
    images = _id_names(ann / "images.txt", "image id -> relative path")
    ids = np.array([i for i, _ in images])
    order = np.argsort(ids, kind="stable")
    ids, paths = ids[order], [images[k][1] for k in order]
    pos = {int(i): k for k, i in enumerate(ids)}

    def per_image(frame: pd.DataFrame, col: str, path: Path) -> np.ndarray:
        missing = set(pos) - set(frame["image"].tolist())
        if missing:
            raise LayoutError(f"{path} has no line for image id(s) {sorted(missing)[:5]}")
        frame = frame[frame["image"].isin(pos)].drop_duplicates("image", keep="last")
        out = np.zeros(len(ids), dtype=frame[col].dtype)
        out[frame["image"].map(pos).to_numpy()] = frame[col].to_numpy()
        return out

    class_names = dict(_id_names(ann / "classes.txt", "class id -> class name")) if (ann / "classes.txt").is_file() \
        else {}
    labels_f = _table(ann / "image_class_labels.txt", ["image", "cls"], "image id -> 1-based class id")
    class_ids = per_image(labels_f, "cls", ann / "image_class_labels.txt")
    all_cls = sorted(set(class_names) | set(int(c) for c in class_ids))
    cls_index = {c: k for k, c in enumerate(all_cls)}
    classes = tuple(class_names.get(c, paths[int(np.argmax(class_ids == c))].split("/")[0]) for c in all_cls)
    split_f = _table(ann / "train_test_split.txt", ["image", "train"], "image id -> is_training_image")
    box_f = _table(ann / "bounding_boxes.txt", ["image", "x", "y", "w", "h"], "image id -> box")
    boxes = np.stack([per_image(box_f, c, ann / "bounding_boxes.txt") for c in "xywh"], 1).astype(np.float32)

    parts = _id_names(ann / "parts" / "parts.txt", "part id -> part name")
    part_pos = {pid: k for k, (pid, _) in enumerate(parts)}
    locs = _table(ann / "parts" / "part_locs.txt", ["image", "part", "x", "y", "visible"], "part locations")
    locs = locs[locs["image"].isin(pos) & locs["part"].isin(part_pos)]
    part_xy = np.zeros((len(ids), len(parts), 2), np.float32)
    visible = np.zeros((len(ids), len(parts)), bool)
    r, c = locs["image"].map(pos).to_numpy(), locs["part"].map(part_pos).to_numpy()
    part_xy[r, c] = locs[["x", "y"]].to_numpy(np.float32)
    visible[r, c] = locs["visible"].to_numpy() > 0

    names: tuple[str, ...] = ()
    attrs = None
    if with_attributes:
        name_file = ann / "attributes" / "attributes.txt"
        if not name_file.is_file():
            name_file = ann / "attributes.txt" if (ann / "attributes.txt").is_file() else ann.parent / "attributes.txt"
        attr_list = _id_names(name_file, "attribute id -> category::value")
        attr_pos = {aid: k for k, (aid, _) in enumerate(attr_list)}
        names = tuple(n for _, n in attr_list)
        lab = _table(ann / "attributes" / "image_attribute_labels.txt", ["image", "attr", "present"],
                     "image attribute labels")
        lab = lab[lab["image"].isin(pos) & lab["attr"].isin(attr_pos)]
        attrs_np = np.zeros((len(ids), len(names)), bool)
        attrs_np[lab["image"].map(pos).to_numpy(), lab["attr"].map(attr_pos).to_numpy()] = lab["present"].to_numpy() > 0
        attrs = torch.from_numpy(attrs_np)

    return CUBAnnotations(
        image_ids=tuple(int(i) for i in ids), paths=tuple(paths),
        labels=torch.as_tensor([cls_index[int(c)] for c in class_ids], dtype=torch.long), classes=classes,
        is_train=torch.from_numpy(per_image(split_f, "train", ann / "train_test_split.txt") > 0),
        boxes=torch.from_numpy(boxes), part_names=tuple(n for _, n in parts), part_xy=torch.from_numpy(part_xy),
        part_visible=torch.from_numpy(visible), attribute_names=names, attributes=attrs,
    )


class CUBDomain(Dataset):
    """One CUB-DG domain, decoded lazily: items `(uint8 [3, S, S], label, {"index": row in the annotations})`."""

    def __init__(self, paths: Sequence[Path], labels: torch.Tensor, rows: Sequence[int], img_size: int):
        self.paths = [str(p) for p in paths]
        self.labels = labels
        self.rows = torch.as_tensor(list(rows), dtype=torch.long)
        self.img_size = img_size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        x = torch.from_numpy(np.array(decode_image(self.paths[i], self.img_size), copy=True))
        return x, int(self.labels[i]), {"index": self.rows[i]}


class CUBDG:
    """The CUB-DG folder: annotations plus the per-domain image files (see the module docstring)."""

    def __init__(self, data_dir: str | Path, with_attributes: bool = True, domains: Sequence[str] | None = None,
                 annotations_dir: str | Path | None = None):
        data_dir = Path(data_dir)
        self.root = data_dir / CUB_DG_DIR
        if not self.root.is_dir():
            raise DataDirNotFoundError(f"CUB-DG folder not found: {self.root} (expected "
                                       f"<data_dir>/{CUB_DG_DIR}/<Domain>/<class_dir>/<image>; see dgmoe.data.cub)")
        ann_dir = Path(annotations_dir) if annotations_dir is not None else data_dir / CUB_ANNOTATIONS_DIR
        self.annotations = read_cub_annotations(ann_dir, with_attributes)
        found = sorted(d.name for d in self.root.iterdir() if d.is_dir() and d.name in CUB_DG_DOMAINS)
        wanted = list(domains) if domains is not None else found
        missing = [d for d in wanted if d not in found]
        if not wanted or missing:
            raise LayoutError(f"CUB-DG domain folder(s) {missing or list(CUB_DG_DOMAINS)} not found in {self.root}; "
                              f"expected some of {', '.join(CUB_DG_DOMAINS)}")
        self.domains = wanted
        self._sizes: dict[int, tuple[int, int]] = {}

    def image_path(self, domain: str, row: int) -> Path:
        path = self.root / domain / self.annotations.paths[row]
        if path.is_file():
            return path
        for ext in IMG_EXTENSIONS:  # a stylised copy saved with another extension
            for cand in (path.with_suffix(ext), path.with_suffix(ext.upper())):
                if cand.is_file():
                    return cand
        raise LayoutError(f"CUB-DG image missing: {path} (domain {domain!r}, image id "
                          f"{self.annotations.image_ids[row]})")

    def rows(self, split: str = "all") -> list[int]:
        """Annotation rows of the official `train` / `test` split, or `all`."""
        if split not in ("all", "train", "test"):
            raise ValueError(f"split must be 'all', 'train' or 'test', got {split!r}")
        keep = self.annotations.is_train if split == "train" else ~self.annotations.is_train
        return list(range(len(self.annotations))) if split == "all" else torch.nonzero(keep).flatten().tolist()

    def original_size(self, row: int) -> tuple[int, int]:
        """(width, height) of the image the annotations refer to (the Natural copy when there is one)."""
        if row not in self._sizes:
            domain = REFERENCE_DOMAIN if (self.root / REFERENCE_DOMAIN).is_dir() else self.domains[0]
            with Image.open(self.image_path(domain, row)) as im:
                self._sizes[row] = im.size
        return self._sizes[row]

    def normalized_parts(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Part locations `[n, P, 2]` in [0, 1] image coordinates and visibility `[n, P]`."""
        wh = torch.tensor([self.original_size(r) for r in rows], dtype=torch.float32)  # [n, 2]
        idx = torch.as_tensor(list(rows), dtype=torch.long)
        return self.annotations.part_xy[idx] / wh[:, None, :], self.annotations.part_visible[idx]

    def normalized_boxes(self, rows: Sequence[int]) -> torch.Tensor:
        wh = torch.tensor([self.original_size(r) for r in rows], dtype=torch.float32)
        return self.annotations.boxes[torch.as_tensor(list(rows), dtype=torch.long)] / wh.repeat(1, 2)

    def dataset(self, img_size: int = 224, split: str = "all") -> MultiDomainDataset:
        """A `MultiDomainDataset` (lazily decoded) over the selected domains and split."""
        rows = self.rows(split)
        envs = [CUBDomain([self.image_path(d, r) for r in rows], self.annotations.labels[rows], rows, img_size)
                for d in self.domains]
        return MultiDomainDataset(name="CUB_DG", domains=list(self.domains), classes=list(self.annotations.classes),
                                  environments=envs, input_shape=(3, img_size, img_size), metadata_fields=("index",))
