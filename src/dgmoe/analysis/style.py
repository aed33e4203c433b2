"""What every dgmoe figure shares: text drawn as given, one colour per domain and per expert, readable titles.

- `mpl_text`: matplotlib reads text between two `$` as maths (`lr$\\frac$x` raises at draw time); every
  string that comes from a user (run folders, domain and layer names) goes through it, once, where it is
  handed to matplotlib.
- `domain_colors`: a domain's colour is fixed by its position in its dataset's domain list, so "photo" has
  the same colour in the accuracy curves, the expert-usage bars and the routing-map titles of every run.
- `expert_colors`: expert `e` has colour `e` of tab10 in routing maps, usage bars and the geo maps.
- `domain_label` marks held-out (test) domains; `block_name` turns `blocks.8.mlp` into `block 8`.
"""
from __future__ import annotations

import re
import textwrap
from typing import Sequence

import numpy as np

EXPERT_CMAP = "tab10"
TEST_MARK = "(test)"


def mpl_text(text: object) -> str:
    """`text` as matplotlib must receive it to draw it literally: every `$` escaped, so no mathtext."""
    return str(text).replace("$", "\\$")


def _palette(n: int) -> np.ndarray:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return cmap(np.arange(n) % cmap.N)


def domain_colors(domains: Sequence[str]) -> dict[str, tuple[float, float, float, float]]:
    """{domain: RGBA}: colour i of tab10 (tab20 beyond 10 domains) for the i-th domain of the dataset."""
    colors = _palette(len(domains))
    rgba = [(float(r), float(g), float(b), float(a)) for r, g, b, a in colors]
    return {str(d): rgba[i] for i, d in enumerate(domains)}


def expert_colors(num_experts: int) -> np.ndarray:
    """`[E, 4]` RGBA: expert e gets colour e (mod 10) of tab10, in every figure."""
    import matplotlib

    return matplotlib.colormaps[EXPERT_CMAP](np.arange(num_experts) % 10)


def domain_label(domain: str, test_domains: Sequence[str] = ()) -> str:
    """`photo (test)` for a held-out domain, the name otherwise."""
    return f"{domain} {TEST_MARK}" if domain in test_domains else str(domain)


def block_name(layer: str) -> str:
    """`block 8 (blocks.8.mlp)` from a module name with a block index, else the name itself."""
    match = re.search(r"blocks?\.(\d+)", layer)
    return f"block {match.group(1)} ({layer})" if match else layer


def wrap(text: str, width: int = 80) -> str:
    """A long title broken into balanced lines of at most about `width` characters (words kept whole)."""
    if len(text) <= width:
        return text
    lines = -(-len(text) // width)
    return "\n".join(textwrap.wrap(text, -(-len(text) // lines) + 4, break_long_words=True)) or text


def checkpoint_text(model: str, step: int | None, which: str | None = None) -> str:
    """`gmoe_tiny_patch16_224, step 300 (best checkpoint)`: which network a figure shows."""
    text = model
    if step is not None:
        text += f", step {step}"
    if which:
        text += f" ({which} checkpoint)"
    return text
