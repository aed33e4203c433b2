"""Block layouts: which transformer blocks are sparse (S: attention + MoE) and which dense (F: attention +
dense FFN, SF-MoE's "fusion" block). One mechanism for every placement:

- SF-MoE layouts written as in the paper (§2.2-2.3, Fig. 4): `[S,F]x6`, `[S]x12`, `[F]x8,[S,F]x2`,
  `F,F,S` ... groups `[...]` with an optional repeat `xN`, separated by commas;
- GMoE placements (§4.3): `last-two` = 0-indexed blocks depth-4 and depth-2 (8 and 10 of 12, as the
  official code, whose layout is `[F]x8,[S,F]x2`; the paper's wording "the last two even layers" counts
  blocks from 1), `every-two` = blocks 0, 2, ..., depth-2 (so last-two is a subset of it), `none`;
- an explicit list of 0-indexed sparse block indices.
"""
from __future__ import annotations

import re
from typing import Sequence

from dgmoe.errors import UsageError

Layout = tuple[str, ...]


class LayoutError(UsageError):
    """A malformed layout string; the message points at the offending position."""

    def __init__(self, spec: str, position: int, message: str):
        caret = " " * position + "^"
        super().__init__(f"bad block layout at position {position}: {message}\n  {spec}\n  {caret}")
        self.position = position


def parse_layout(spec: str) -> Layout:
    """Parse a layout string such as `[F]x8,[S,F]x2` into a tuple of 'S'/'F' letters."""
    letters: list[str] = []
    pos, n = 0, len(spec)
    expect_item = True
    while pos < n:
        if spec[pos].isspace():
            pos += 1
            continue
        if expect_item:
            if spec[pos] == "[":
                close = spec.find("]", pos)
                if close < 0:
                    raise LayoutError(spec, pos, "'[' is never closed")
                group = _parse_group(spec, pos + 1, close)
                pos = close + 1
                match = re.match(r"\s*x\s*(\d+)", spec[pos:], re.IGNORECASE)
                repeat = 1
                if match:
                    repeat = int(match.group(1))
                    if repeat < 1:
                        raise LayoutError(spec, pos, "repeat count must be >= 1")
                    pos += match.end()
                letters.extend(group * repeat)
            elif spec[pos].upper() in "SF":
                letters.append(spec[pos].upper())
                pos += 1
            else:
                raise LayoutError(spec, pos, f"expected 'S', 'F' or '[' but found {spec[pos]!r}")
            expect_item = False
        else:
            if spec[pos] != ",":
                raise LayoutError(spec, pos, f"expected ',' between items but found {spec[pos]!r}")
            pos += 1
            expect_item = True
    if expect_item:
        raise LayoutError(spec, n, "layout is empty or ends with ','")
    return tuple(letters)


def _parse_group(spec: str, start: int, end: int) -> list[str]:
    items = spec[start:end].split(",")
    out, pos = [], start
    for item in items:
        stripped = item.strip()
        offset = pos + (len(item) - len(item.lstrip()))
        if stripped.upper() not in ("S", "F"):
            raise LayoutError(spec, offset, f"a group holds only 'S' or 'F' letters, found {stripped!r}")
        out.append(stripped.upper())
        pos += len(item) + 1
    return out


def resolve_layout(placement: str | Sequence[int] | None, depth: int) -> Layout:
    """Turn a placement (named, layout string or index list) into one letter per block."""
    if placement is None or placement == "none":
        return ("F",) * depth
    if isinstance(placement, str):
        if placement == "last-two":
            if depth < 4:
                raise ValueError(f"the 'last-two' MoE layout (blocks depth-4 and depth-2) needs depth >= 4, got "
                                 f"depth {depth}; give the sparse blocks with moe_layers, e.g. [{depth - 1}]")
            sparse = {depth - 4, depth - 2}
        elif placement == "every-two":
            sparse = set(range(0, depth, 2))
        else:
            layout = parse_layout(placement)
            if len(layout) != depth:
                raise ValueError(f"layout {placement!r} has {len(layout)} blocks but the model has depth {depth}")
            return layout
    else:
        sparse = set(int(i) for i in placement)
    bad = sorted(i for i in sparse if not 0 <= i < depth)
    if bad:
        raise ValueError(f"MoE block indices {bad} are outside 0..{depth - 1}")
    return tuple("S" if i in sparse else "F" for i in range(depth))


def sparse_blocks(layout: Layout) -> tuple[int, ...]:
    return tuple(i for i, letter in enumerate(layout) if letter == "S")
