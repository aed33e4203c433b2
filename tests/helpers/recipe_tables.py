"""Reading a recipe comparison (`dgmoe results --recipe`) as printed, in the tests."""
from __future__ import annotations


def comparison_row(output: str, table: str, label: str) -> dict[str, str]:
    """The cells of `label`'s line in the table titled `table`, by column header."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### ") and line[4:].startswith(table))
    header = next(line for line in lines[start:] if line.startswith("| Row"))
    row = next(line for line in lines[start:] if line.startswith(f"| {label} "))
    return dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
