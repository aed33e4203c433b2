"""`dgmoe.tables` is the one table renderer: byte for byte what pandas/tabulate print for the results tables,
and no source file builds a Markdown table by hand."""
import random
import re
from pathlib import Path

import pandas as pd
import pytest

from dgmoe.tables import markdown_table, render_table

SRC = Path(__file__).resolve().parents[1] / "src" / "dgmoe"


def test_markdown_tables_match_tabulates_pipe_format():
    rng = random.Random(0)
    letters = "ab +/-.X_1±"
    for _ in range(300):
        cols, n = rng.randint(1, 5), rng.randint(1, 4)
        header = [("h" + "".join(rng.choice(letters) for _ in range(rng.randint(0, 10)))).strip() for _ in range(cols)]
        rows = [["".join(rng.choice(letters) for _ in range(rng.randint(0, 14))) for _ in range(cols)]
                for _ in range(n)]
        align = ["left"] + ["right"] * (cols - 1)
        expected = pd.DataFrame(rows, columns=header).to_markdown(index=False, disable_numparse=True,
                                                                   colalign=align)
        assert markdown_table(header, rows) == expected


def test_alignment_padding_and_latex():
    assert markdown_table(["a", "bb"], [["x", 1]], left=2).splitlines() == ["| a   | bb   |", "|:----|:-----|",
                                                                         "| x   | 1    |"]
    assert "x \\& y & 1 \\\\" in render_table(["a", "b"], [["x & y", "1"]], latex=True)
    with pytest.raises(ValueError, match="2 cells"):
        markdown_table(["a", "b"], [["only one"]])


def test_no_markdown_table_is_built_by_hand():
    rule = re.compile(r"""["']\|:?-{3}""")  # a string literal that starts a rule line such as "|---|" or "|:---"
    hand = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if rule.search(p.read_text())]
    assert not hand, hand
