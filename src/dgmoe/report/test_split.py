"""Which images of a held-out domain a results table's test column reads: `in` or `out`.

DomainBed splits every domain into `in` (80%) and `out` (20%) with a seeded hash, and reports a held-out domain's
accuracy on its `in` split: facebookresearch/DomainBed `domainbed/model_selection.py` (read at 29b1bf5) returns
`test_acc = env{t}_in_acc` of the held-out domain t under each of its three methods (training-domain validation,
leave-one-domain-out, and test-domain validation, the last validating on `env{t}_out_acc`). CLIPood tests on the
`out` split instead: thuml/CLIPood `converter_domainbed.py` (read at 538dd3b) holds out 20% of each domain
(`holdout=0.2`) and returns the target domains' out splits as its test sets. dgmoe's records hold both accuracies
of every domain, so either can be reported: `with_test_split(records, "out")` gives records whose held-out
domains' `in` accuracies are their `out` accuracies, which every selection method then reports unchanged.
Training domains keep their splits (training-domain validation still reads their `out` accuracies), and so do
the runs that hold out a pair of domains, whose `in` accuracy of the second domain is leave-one-domain-out's
validation. Test-domain validation selects on the held-out domain's `out` split, so it cannot report that split
(`check_selection`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light: the CLI checks its flags with `check_selection` before pandas is loaded
    import pandas as pd

TEST_SPLITS = ("in", "out")
DEFAULT = "in"
#: one line a table prints to say which split its test column is
DESCRIBE = {"in": "each held-out domain's 'in' split (80% of its images, DomainBed's test split)",
            "out": "each held-out domain's 'out' split (20% of its images, CLIPood's test split)"}


def with_test_split(records: pd.DataFrame, split: str) -> pd.DataFrame:
    """`records` whose single held-out domain's `env{t}_in_acc` holds the accuracy on `split` (see the module
    docstring); `in` returns them as they are."""
    if split not in TEST_SPLITS:
        raise ValueError(f"test split {split!r} is not one of {', '.join(TEST_SPLITS)}")
    if split == DEFAULT or records.empty:
        return records
    out = records.copy()
    single = out["test_envs"].map(len) == 1
    for env in sorted({int(t[0]) for t in out.loc[single, "test_envs"]}):
        src, dst = f"env{env}_out_acc", f"env{env}_in_acc"
        if src in out.columns and dst in out.columns:
            rows = single & out["test_envs"].map(lambda t, e=env: len(t) == 1 and int(t[0]) == e)
            out.loc[rows, dst] = out.loc[rows, src]
    return out


def check_selection(split: str, selection: str) -> None:
    """Refuse test-domain validation with the `out` test split: it would select on the images it reports."""
    if split == "out" and selection == "oracle":
        raise ValueError("--test-split out with --selection oracle: test-domain validation selects on the held-out "
                         "domain's out split, the split it would report; use iid or loo")
