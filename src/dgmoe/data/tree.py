"""Walking a `<domain>/<class>/<image>` tree without decoding anything (no numpy, no torch: `dgmoe data check`
uses it too): the visible folders of a folder, and the images under a class folder, refusing a folder reached
twice (a symlink loop) or a link into another class folder, as `dgmoe train` does."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from dgmoe.data.errors import LayoutError

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def visible_dirs(path: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))


def images_under(path: Path, other_classes: dict[str, Path] | None = None) -> list[str]:
    """Image files below `path` (recursive, following links), as sorted paths relative to `path`. A folder
    reached twice (a symlink loop, or two links to one folder) is refused: its images would count twice; so is
    a link into another class folder (`other_classes`: real path -> folder): its images would be relabelled."""
    found: list[str] = []
    seen: dict[str, str] = {}
    own = os.path.realpath(path)
    for dirpath, dirnames, filenames in os.walk(path, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            raise LayoutError(f"{dirpath} is the folder {seen[real]} again (a symlink loop or a duplicate link); "
                              "its images would be counted twice: remove the link")
        inside = [f for r, f in (other_classes or {}).items()
                  if (real == r or real.startswith(r + os.sep)) and not (real == own or real.startswith(own + os.sep))]
        if inside:
            raise LayoutError(f"{dirpath} leads into the class folder {inside[0]} (a symlink): its images would be "
                              f"labelled {Path(path).name}: remove the link")
        seen[real] = dirpath
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, path)
        for f in filenames:
            if not f.startswith(".") and f.lower().endswith(IMG_EXTENSIONS):
                found.append(f if rel == "." else os.path.join(rel, f))
    return sorted(found)


def class_folders(root: Path, classes: Mapping[str, Iterable[str]]) -> dict[str, Path]:
    """{real path: folder} of every `<root>/<domain>/<class>` folder (`classes`: domain -> its class names);
    refuses two class folders that are one folder (a link to another class folder): its images would be counted
    twice, under two labels or in two domains."""
    out: dict[str, Path] = {}
    for domain, names in classes.items():
        for name in names:
            folder = root / domain / name
            real = os.path.realpath(folder)
            if real in out:
                raise LayoutError(f"{folder} is the class folder {out[real]} again (a symlink): its images would be "
                                  "counted twice: remove the link")
            out[real] = folder
    return out
