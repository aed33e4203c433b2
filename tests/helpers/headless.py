"""Headless Chromium for the report tests: screenshots, the rendered DOM, and layout facts read by a probe."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=5000")
SKIP_REASON = ("headless Chromium not installed (Debian package `chromium`, installed by .ci/run): "
               "the report screenshot tests need it")

# appended to a copy of a page: writes the layout facts the tests check into the DOM, as JSON
PROBE = """<script>addEventListener('load', () => {
  const rects = [...document.images].map(i => {const r = i.getBoundingClientRect();  // content box: no border
    return {x: r.x + i.clientLeft, y: r.y + i.clientTop, w: i.clientWidth, h: i.clientHeight, alt: i.alt,
            src: i.src, done: i.complete && i.naturalWidth > 0};});
  const out = document.createElement('pre'); out.id = 'probe'; out.style.display = 'none';
  out.textContent = JSON.stringify({scrollWidth: document.documentElement.scrollWidth,
    mainWidth: document.querySelector('main').getBoundingClientRect().width, images: rects});
  document.body.appendChild(out);});</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=timeout)


def screenshot(page: Path, out: Path, profile: Path, width: int = 1280, height: int = 2000) -> np.ndarray:
    """The page rendered in a `width` x `height` window, as a grey-level array."""
    from PIL import Image

    proc = run([f"--screenshot={out}", f"--window-size={width},{height}", page.as_uri()], profile)
    assert out.is_file(), f"chromium wrote no screenshot: {proc.stderr[-2000:]}"
    return np.asarray(Image.open(out).convert("L"), dtype=float)


def likeness(shot: np.ndarray, box: dict) -> float:
    """Correlation of the screenshot's region `box` (a probe image entry: its content box) with that image's own
    file, resized to the box: near 1 when the page shows the figure itself, whatever its colours or fonts."""
    from urllib.parse import unquote, urlparse

    from PIL import Image

    x, y, w, h = (int(round(box[k])) for k in ("x", "y", "w", "h"))
    region = shot[y:y + h, x:x + w]
    figure = Image.open(unquote(urlparse(box["src"]).path)).convert("L").resize(region.shape[::-1], Image.BILINEAR)
    return float(np.corrcoef(region.ravel(), np.asarray(figure, dtype=float).ravel())[0, 1])


def shown_figures(page: Path, boxes: list[dict], out: Path, profile: Path, width: int, height: int,
                  attempts: int = 3) -> list[float]:
    """`likeness` of each image box (probe entries, all on screen) in a screenshot of `page`, the best of up to
    `attempts` screenshots. Chromium may capture before a tile of an image is rasterised (a white rectangle
    over part of a figure, seen on a loaded machine), so a screenshot is retaken while some figure is not
    shown; a figure that is missing or wrong stays unlike its file in every one."""
    best = [-1.0] * len(boxes)
    for attempt in range(attempts):
        shot = screenshot(page, out.with_name(f"{out.stem}-{attempt}{out.suffix}"), profile, width, height)
        best = [max(b, likeness(shot, box)) for b, box in zip(best, boxes)]
        if min(best) > 0.9:
            break
    return best


def dom(page: Path, profile: Path) -> str:
    return run(["--dump-dom", page.as_uri()], profile).stdout


def probe(page: Path, profile: Path, width: int = 1280, height: int = 2000) -> tuple[dict, str]:
    """(layout facts, rendered DOM) of `page` in a `width` x `height` window: its scroll width, the width of
    its <main>, and every image's box, alt text and whether it loaded. Uses a copy beside the page."""
    copy = page.with_name(page.stem + ".probe.html")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    try:
        text = run([f"--window-size={width},{height}", "--dump-dom", copy.as_uri()], profile).stdout
    finally:
        copy.unlink()
    match = re.search(r'<pre id="probe"[^>]*>(.*?)</pre>', text, re.S)
    assert match, f"the probe did not run: {text[-1000:]}"
    return json.loads(html.unescape(match.group(1))), text
