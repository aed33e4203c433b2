"""A run's `--label` is user text: whatever it holds, every table format shows it in its own cell and every
number stays under its column (Markdown, CSV, LaTeX, the HTML results page); a label that cannot be one line
is refused by `dgmoe train` in one line, before anything is written."""
from __future__ import annotations

import csv
import html
import io
import json
import re

import pytest
from md_tables import table_cells
from recipe_sweep import write_run

DOMAINS = ("d0", "d1", "d2", "d3")
CORAL = "CORAL / vit_micro_patch7_28"
#: the campaign's labels; the last is no run label `train` accepts (a record written elsewhere may hold it)
LABELS = ["ERM|lr=1e-4", "R&D 100%", "<script>alert(1)</script>", "a_b {c} $x$ #1 ~^\\", "two\nlines"]


def _sweep(root, label):
    """A labelled ERM run and a plain CORAL run, test domain 0: ERM's d0 accuracy 0.25, CORAL's 0.75."""
    for algorithm, acc, name in (("ERM", 0.25, label), ("CORAL", 0.75, None)):
        folder = write_run(root / algorithm, "Debug28", DOMAINS, algorithm, "vit_micro_patch7_28", [0], {0: acc})
        lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        for record in lines:
            record["args"]["label"] = name
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def _shown(label):
    """The label as a one-line cell shows it (a newline as its escape)."""
    return label.replace("\n", "\\n")


@pytest.mark.parametrize("label", LABELS, ids=["pipe", "amp-percent", "script", "latex-specials", "newline"])
def test_every_format_keeps_a_label_in_its_cell(cli, tmp_path, label):
    _sweep(tmp_path, label)
    result = cli("results", tmp_path, "--selection", "oracle", "--csv", "--page")
    assert result.exit_code == 0, result.output
    md = (tmp_path / "results.md").read_text()
    tables = [[table_cells(line) for line in block.splitlines() if line.startswith("|")]
              for block in md.split("\n\n") if block.startswith("|")]
    assert tables
    for rows in tables:
        assert len({len(r) for r in rows}) == 1, rows  # no row has a cell more or less than the header
    (dataset_table, *_) = tables
    header, body = dataset_table[0], {r[0]: r for r in dataset_table[2:]}
    assert set(body) == {_shown(label), CORAL}
    assert body[_shown(label)][header.index("d0")] == "25.0 +/- 0.0"  # d0's accuracy under d0
    assert body[CORAL][header.index("d0")] == "75.0 +/- 0.0"

    rows = list(csv.DictReader(io.StringIO((tmp_path / "results.csv").read_text())))
    mine = [r for r in rows if r["table"] == "Debug28" and r["row"] == _shown(label)]
    assert {r["column"]: r["cell"] for r in mine}["d0"] == "25.0 +/- 0.0"
    assert len(mine) == len([r for r in rows if r["table"] == "Debug28" and r["row"] == CORAL]) == 5

    page = (tmp_path / "results_page" / "index.html").read_text()
    assert "<script>" not in page
    cells = re.findall(r"<tr><td class=\"l\">" + re.escape(html.escape(_shown(label), quote=False))
                       + r"</td>(.*?)</tr>", page)
    assert cells and cells[0].startswith("<td>25.0 +/- 0.0</td>") and cells[0].count("<td") == 5, cells  # d0..Avg

    assert cli("results", tmp_path, "--selection", "oracle", "--latex").exit_code == 0
    tex = (tmp_path / "results.tex").read_text()
    body_lines = [line for line in tex.splitlines() if line.endswith("\\\\") and "25.0" in line]
    assert body_lines and body_lines[0][:-2].count(" & ") == 5, body_lines  # the dataset table: d0..d3, Avg
    assert body_lines[0].split(" & ")[1] == "25.0 $\\pm$ 0.0"
    assert all(not re.search(r"(?<!\\)[&%$#_{}|<>]", line.split(" & ")[0].replace("\\textbackslash{}", "")
                                .replace("\\textbar{}", "").replace("\\textless{}", "").replace("\\textgreater{}", "")
                                .replace("\\textasciitilde{}", "").replace("\\textasciicircum{}", ""))
               for line in body_lines)


def test_train_refuses_a_label_of_two_lines(cli, tmp_path):
    out = tmp_path / "run"
    result = cli("train", "--dataset", "RotatedMNIST", "--output-dir", out, "--label", "two\nlines")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "--label must be one line of text" in result.output and not out.exists()
