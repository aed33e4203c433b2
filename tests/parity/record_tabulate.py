"""Record tabulate's "pipe" tables, as pandas' `DataFrame.to_markdown` prints them, for
tests/test_tables.py. dgmoe does not depend on tabulate (its own `dgmoe.tables.markdown_table` prints the same
bytes); the recorder needs it and pandas, in a throwaway directory (not committed, not in CI):

    pip install --no-deps --target /tmp/peers-tab tabulate==0.10.0
    PYTHONPATH=/tmp/peers-tab python tests/parity/record_tabulate.py

It writes fixtures/tabulate_pipe.json: random headers and rows of the characters results tables hold (letters,
"+/-", ".", "X", "_", digits, "±", spaces at the ends), each with the text
`DataFrame(rows, columns=header).to_markdown(index=False, disable_numparse=True, colalign=...)` printed, the
first column aligned left and the others right, as dgmoe's results tables are. It does not import dgmoe.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import tabulate

CASES = 200


def main() -> None:
    rng = random.Random(0)
    letters = "ab +/-.X_1±"
    cases = []
    for _ in range(CASES):
        cols, n = rng.randint(1, 5), rng.randint(1, 4)
        header = [("h" + "".join(rng.choice(letters) for _ in range(rng.randint(0, 10)))).strip() for _ in range(cols)]
        rows = [["".join(rng.choice(letters) for _ in range(rng.randint(0, 14))) for _ in range(cols)]
                for _ in range(n)]
        align = ["left"] + ["right"] * (cols - 1)
        text = pd.DataFrame(rows, columns=header).to_markdown(index=False, disable_numparse=True, colalign=align)
        cases.append({"header": header, "rows": rows, "markdown": text})
    out = Path(__file__).resolve().parent / "fixtures" / "tabulate_pipe.json"
    out.write_text(json.dumps({"peer": f"tabulate {tabulate.__version__}, pandas {pd.__version__}",
                               "command": "PYTHONPATH=/tmp/peers-tab python tests/parity/record_tabulate.py",
                               "cases": cases}, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
