"""Where a report's files go (`Layout`) and how its figures are stored (`FigureStore`: each distinct PNG once,
compacted). Used by `dgmoe.report.html`, which writes the report, and `dgmoe.report.pages`, which links to it."""
from __future__ import annotations

import hashlib
import html
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

from dgmoe.atomic import write_bytes_atomic
from dgmoe.report.groups import Group
from dgmoe.report.runs import RunInfo

#: stored figures are scaled down to this width (the page is 1100 CSS pixels wide) and this many bytes.
MAX_FIGURE_WIDTH = 1100
MAX_FIGURE_BYTES = 300_000
CHART = "accuracy-per-step"  # the file name (after the run's slug) of the charts the report draws itself


@dataclass(frozen=True)
class Layout:
    """Where the pages go: the index, and the folder that holds `runs/` and `figures/`."""

    index: Path
    assets: Path

    @property
    def runs(self) -> Path:
        return self.assets / "runs"

    @property
    def figures(self) -> Path:
        return self.assets / "figures"

    @property
    def groups(self) -> Path:
        return self.assets / "groups"

    @property
    def by(self) -> Path:
        return self.assets / "by"

    @property
    def folders(self) -> tuple[Path, ...]:
        return self.runs, self.figures, self.groups, self.by

    def run_page(self, run: RunInfo) -> Path:
        return self.runs / f"{run.slug}.html"

    def group_page(self, group: Group, k: int = 1) -> Path:
        return self.groups / f"{group.slug}-{k}.html"

    @staticmethod
    def relative(page: Path, target: Path) -> str:
        """Relative URL from `page` to `target`, not escaped (a table cell's link: `Cell.html` escapes it)."""
        return os.path.relpath(target, page.parent).replace(os.sep, "/")

    @staticmethod
    def link(page: Path, target: Path) -> str:
        """Relative URL from `page` to `target`, escaped for an HTML attribute."""
        return html.escape(Layout.relative(page, target), quote=True)


def layout_of_index(index: Path) -> Layout:
    return Layout(index, index.parent if index.name == "index.html" else index.parent / f"{index.stem}_files")


def report_layout(root: Path, out: str | Path | None) -> Layout:
    """`out` a folder (default `RUNS_DIR/report/`): `out/index.html`, `out/runs/`, `out/figures/`; or an
    `.html` file: that file, with its runs/ and figures/ in `<name>_files/` beside it."""
    out = Path(out) if out is not None else root / "report"
    return layout_of_index(out if out.suffix.lower() in (".html", ".htm") else out / "index.html")


def compact_png(data: bytes, max_width: int = MAX_FIGURE_WIDTH, max_bytes: int = MAX_FIGURE_BYTES) -> bytes:
    """`data` as the report stores it: at most `max_width` pixels wide, quantised to 256 colours (if that is
    smaller), and scaled down further until it takes at most `max_bytes`."""
    from PIL import Image

    try:
        img: Image.Image = Image.open(io.BytesIO(data))
        img.load()
    except Exception:  # not an image PIL reads: keep the file as it is
        return data
    if img.mode in ("RGBA", "LA", "P", "PA"):
        img = img.convert("RGBA")
        flat = Image.new("RGB", img.size, "white")
        flat.paste(img, mask=img.getchannel("A"))
        img = flat
    img = img.convert("RGB")
    scale = min(1.0, max_width / img.width)
    while True:
        size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
        shown = img if size == img.size else img.resize(size, Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        shown.quantize(256, method=Image.Quantize.FASTOCTREE).save(buf, "PNG", optimize=True)
        out = buf.getvalue() if buf.tell() < len(data) or size != img.size else data
        if len(out) <= max_bytes or scale < 0.2:
            return out
        scale *= 0.8


class FigureStore:
    """Writes each distinct figure once under `folder`, compacted; returns the file of every figure added."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.by_digest: dict[str, Path] = {}
        self.copied = 0  # distinct figures copied from analysis folders (the budget allows for each)

    def add(self, data: bytes, name: str, copied: bool = False) -> tuple[Path, tuple[int, int] | None]:
        """(file, (width, height)) of a PNG stored as `<name>.png` (or as the identical file stored before);
        `copied`: a figure from a run's analysis rather than one the report drew."""
        from PIL import Image

        digest = hashlib.sha1(data).hexdigest()
        if digest not in self.by_digest:
            self.copied += copied
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
            path, k = self.folder / f"{stem}.png", 2
            while path in self.by_digest.values():  # two figures whose names clash
                path, k = self.folder / f"{stem}-{k}.png", k + 1
            write_bytes_atomic(path, compact_png(data))
            self.by_digest[digest] = path
        path = self.by_digest[digest]
        try:
            with Image.open(path) as img:
                return path, img.size
        except Exception:
            return path, None
