"""No CSV that dgmoe writes holds a cell a spreadsheet program would evaluate: text starting with `=`, `+`, `-`,
`@`, a tab or a carriage return (OWASP's CSV-injection list) is written after a single quote, and a number
(negative ones included) stays a number. Checked on the renderer and through each CSV file dgmoe writes:
`results --csv` (results.csv), `results --recipe --csv` (results_recipe.csv, the same `Document.csv`) and the
routing analysis' expert_usage.csv (`analyze routing`, `report --analyze`)."""
from __future__ import annotations

import csv
import io
import json

import pytest
import torch
from recipe_sweep import write_run

from dgmoe.document import Cell, Document, Heading, Protocol, Table
from dgmoe.tables import FORMULA_STARTS, csv_cell, csv_text

HYPERLINK = '=HYPERLINK("http://x","y")'


def _formula_free(text: str) -> list[list[str]]:
    """The parsed rows of a CSV text, after asserting that no cell starts a formula (a number may be signed)."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    for row in rows:
        for value in row:
            if value.startswith(FORMULA_STARTS):
                float(value)  # a signed number; anything else is a formula to a spreadsheet
    return rows


@pytest.mark.parametrize("value,written", [
    (HYPERLINK, "'" + HYPERLINK), ("+1+1", "'+1+1"), ("-2+3", "'-2+3"), ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
    ("\t=1", "'\t=1"), ("\r=1", "'\r=1"), ("-", "'-"), ("-inf", "'-inf"), ("-1.5 +/- 0.2", "'-1.5 +/- 0.2"),
    ("-1.5", "-1.5"), ("+2", "+2"), ("-3e-05", "-3e-05"), (-1.5, "-1.5"), (-7, "-7"), (0.25, "0.25"),
    ("ERM = best", "ERM = best"), ("'quoted", "'quoted"), (None, ""), ("", ""),
])
def test_a_cell_that_would_be_a_formula_is_quoted_and_a_number_stays_a_number(value, written):
    assert csv_cell(value) == written
    assert list(csv.reader(io.StringIO(csv_text(["c"], [[value]]), newline="")))[1] == [written]


def test_document_csv_quotes_labels_titles_columns_and_protocol_values_but_not_numbers():
    table = Table.make("@table", ["=method", "-d0", "+d1"],
                       [[HYPERLINK, Cell(mean=-1.5, se=0.25, decimals=2), Cell(mean=2.0, signed=True)]])
    doc = Document((Heading("=title", 1), Protocol((("=name", "-value"),)), Heading("+section", 2), table))
    rows = list(csv.DictReader(io.StringIO(doc.csv())))
    _formula_free(doc.csv())
    assert rows[0] == {"section": "protocol", "table": "", "row": "'=name", "column": "", "cell": "'-value",
                       "mean": "", "se": "", "sd": ""}
    assert rows[1] == {"section": "'+section", "table": "'@table", "row": "'" + HYPERLINK, "column": "'-d0",
                       "cell": "'-1.50 +/- 0.25", "mean": "-1.5", "se": "0.25", "sd": ""}
    assert (rows[2]["cell"], rows[2]["mean"]) == ("+2.0", "2.0")  # a signed number is a number


def _sweep(root, label, domains):
    for algorithm, acc, name in (("ERM", 0.25, label), ("CORAL", 0.75, None)):
        folder = write_run(root / algorithm, "Debug28", domains, algorithm, "vit_micro_patch7_28", [0], {0: acc})
        lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        for record in lines:
            record["args"]["label"] = name
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_results_csv_writes_a_formula_label_and_domain_names_as_text(cli, tmp_path):
    domains = ("=1+1", "-2", "@d2", "+d3")  # (a domain folder's name is user text too)
    _sweep(tmp_path, HYPERLINK, domains)
    result = cli("results", tmp_path, "--selection", "oracle", "--csv")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "results.csv").read_text()
    rows = [dict(zip(["section", "table", "row", "column", "cell", "mean", "se", "sd"], r))
            for r in _formula_free(text)[1:]]
    mine = [r for r in rows if r["table"] == "Debug28" and r["row"] == "'" + HYPERLINK]
    assert {r["column"] for r in mine} == {"'=1+1", "-2", "'@d2", "'+d3", "Avg"}, mine
    assert {r["column"]: r["cell"] for r in mine}["'=1+1"] == "25.0 +/- 0.0"
    assert HYPERLINK in (tmp_path / "results.md").read_text()  # (the text tables show the label as it is)


def test_the_expert_usage_csv_writes_domain_names_as_text(tmp_path):
    from dgmoe.analysis.pipeline import RunImages, analyze_routing
    from dgmoe.models import create_model

    torch.manual_seed(0)
    model = create_model("gmoe_micro_patch7_28", num_classes=3)
    domains = ["=cmd|' /C calc'!A0", "-1+2", "photo"]
    images = {d: torch.zeros(1, 3, 28, 28, dtype=torch.uint8) for d in domains}
    inputs = {d: torch.randn(1, 3, 28, 28) for d in domains}
    run = RunImages(model, {"dataset": {"domains": domains}}, images, inputs)
    analyze_routing(run, tmp_path, show=1)
    rows = _formula_free((tmp_path / "expert_usage.csv").read_text())
    assert rows[0] == ["layer", "domain", "expert", "fraction"]
    assert {r[1] for r in rows[1:]} == {"'=cmd|' /C calc'!A0", "'-1+2", "photo"}
    assert all(0 <= float(r[3]) <= 1 and r[2].isdigit() for r in rows[1:])
