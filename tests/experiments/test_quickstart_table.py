"""`dgmoe quickstart` prints its table through `dgmoe.document.Table`: the text docs/benchmarks.md records (as
pandas' `to_markdown` printed it), from the rows `quickstart` returns (its training stubbed: only the printing
is under test here; the slow suite trains it)."""
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
ROWS = [  # the documented run's numbers (docs/benchmarks.md), as `quickstart` returns them (fractions, seconds)
    {"model": "vit_micro_patch7_28", "selected step": 299, "in-domain acc": 0.818, "out-of-domain acc": 0.575,
     "test domain": "0", "train time (s)": 67.2},
    {"model": "gmoe_micro_patch7_28", "selected step": 299, "in-domain acc": 0.829, "out-of-domain acc": 0.584,
     "test domain": "0", "train time (s)": 108.4},
]


@pytest.fixture
def stubbed(monkeypatch):
    import dgmoe.engine.trainer as trainer
    import dgmoe.experiments.quickstart as qs

    monkeypatch.setattr(qs, "quickstart", lambda *a, **k: [dict(r) for r in ROWS])
    monkeypatch.setattr(trainer, "main_log_config", lambda *a, **k: None)


def test_quickstart_prints_the_documented_table(cli, stubbed):
    result = cli("quickstart", "--output-dir", "runs/quickstart")
    assert result.exit_code == 0, result.output
    printed = [line for line in result.output.splitlines() if line.startswith("|")]
    documented = [line for line in DOCS.read_text().split("dgmoe quickstart --output-dir runs/quickstart")[1]
                  .split("Run folders:")[0].splitlines() if line.startswith("|")]
    assert len(documented) == 4 and printed == documented


def test_text_columns_align_left(cli, stubbed, monkeypatch):
    import dgmoe.experiments.quickstart as qs

    monkeypatch.setattr(qs, "quickstart", lambda *a, **k: [dict(r, **{"test domain": "art_painting, photo"})
                                                           for r in ROWS])
    result = cli("quickstart", "--output-dir", "runs/quickstart")
    rule = next(line for line in result.output.splitlines() if line.startswith("|:"))
    assert rule.split("|")[5].startswith(":") and rule.split("|")[6].endswith(":")  # test domain left, time right
