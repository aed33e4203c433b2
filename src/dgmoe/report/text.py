"""Words and numbers as reports print them (no pandas, no torch: the command line uses them too).

`count(1, "run")` is "1 run", `count(2, "run")` "2 runs"; `rounded` prints a number to the precision its
noise allows (`decimals_for`), so that a table never shows four decimals of a timing that varies by a tenth.
"""
from __future__ import annotations

import math

from dgmoe.document import Cell


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun in the right number: "1 run", "3 runs", "1 analysis", "2 analyses" (given)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def decimals_for(noise: float, most: int = 4) -> int:
    """Decimals that show a number to its noise: one significant digit of `noise` (0.03 -> 2, 0.4 -> 1,
    7 -> 0); `most` when there is no noise to go by (0 or not finite)."""
    if not math.isfinite(noise) or noise <= 0:
        return most
    return max(0, min(most, -math.floor(math.log10(noise))))


def _places(value: float, noise: float | None, decimals: int | None) -> int:
    if decimals is not None:
        return decimals
    if noise is not None:
        return decimals_for(noise)
    magnitude = math.floor(math.log10(abs(value))) if value else 0
    return max(0, 2 - magnitude)


def rounded(value: float | int | None, noise: float | None = None, decimals: int | None = None) -> str:
    """A number as a table shows it: to `decimals`, or to the precision of `noise` (`decimals_for`), else
    to three significant digits; '' for None or NaN, integers as integers."""
    return rounded_cell(value, noise, decimals).render()


def rounded_cell(value: float | int | None, noise: float | None = None, decimals: int | None = None) -> Cell:
    """`rounded` as a table cell that carries its number (a blank cell for None or NaN)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return Cell()
    if isinstance(value, int) and not isinstance(value, bool):
        return Cell(mean=value, decimals=0)
    return Cell(mean=value, decimals=_places(value, noise, decimals))
