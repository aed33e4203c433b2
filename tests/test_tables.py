"""`dgmoe.tables` is the one table renderer and `dgmoe.document` the table model: byte for byte what
pandas/tabulate print for the results tables (recorded from tabulate, which dgmoe does not depend on), every
format of a table from one `Table` of cells that carry their numbers, and no source file builds a Markdown table
by hand or prints one through pandas."""
import csv
import io
import json
import re
from pathlib import Path

import pytest

from dgmoe.document import MISSING, Cell, Document, Heading, Protocol, Table, Text
from dgmoe.tables import markdown_table

SRC = Path(__file__).resolve().parents[1] / "src" / "dgmoe"
FIXTURE = Path(__file__).resolve().parent / "parity" / "fixtures" / "tabulate_pipe.json"


def test_markdown_tables_match_tabulates_pipe_format():
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert recorded["peer"].startswith("tabulate 0.10.0") and len(recorded["cases"]) == 200
    for case in recorded["cases"]:
        assert markdown_table(case["header"], case["rows"]) == case["markdown"], case


def test_alignment_padding_and_latex():
    assert markdown_table(["a", "bb"], [["x", 1]], left=2).splitlines() == ["| a   | bb   |", "|:----|:-----|",
                                                                         "| x   | 1    |"]
    assert "x \\& y & 1 \\\\" in Table.make("t", ["a", "b"], [["x & y", 1]]).latex()
    with pytest.raises(ValueError, match="2 cells"):
        markdown_table(["a", "b"], [["only one"]])
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        Table.make("t", ["a", "b"], [["only one"]])


def test_cells_render_their_numbers():
    c = Cell(mean=20.0, se=4.714)
    assert (c.render(), c.render(latex=True), c.numbers()) == ("20.0 +/- 4.7", "20.0 $\\pm$ 4.7", (20.0, 4.7))
    assert Cell(mean=12.345, unit="%").render(latex=True) == "12.3\\%"
    assert Cell(mean=1.25, signed=True, decimals=2).render() == "+1.25"
    assert Cell(mean=70.0, suffix=" (partial)").render() == "70.0 (partial)"
    assert MISSING.render() == "X" and MISSING.numbers() == (None, None)
    assert Cell("a_b").render(latex=True) == "a\\_b"


def test_html_cells_escape_quotes_and_their_links_once():
    """One escape for every HTML table cell (`html_text`: `&`, `<`, `>` and both quotes), links escaped once."""
    table = Table.make("", ["run", "n"], [['it\'s "x" <b>', Cell(mean=3, decimals=0, links=(("3", "g/a&b.html"),))]])
    assert '<td class="l">it&#x27;s &quot;x&quot; &lt;b&gt;</td><td><a href="g/a&amp;b.html">3</a></td>' in table.html()
    assert "<h3" not in table.html()  # an untitled table


def test_a_standard_deviation_prints_as_mean_plus_minus_sd_and_carries_its_numbers_into_csv():
    """The experiments' "mean ± std over seeds" cells: the same text in every format, the numbers in CSV."""
    c = Cell(mean=51.234, sd=1.04)
    assert c.render() == c.render(latex=True) == "51.2 ± 1.0" and (c.numbers(), c.deviation()) == ((51.2, None), 1.0)
    assert Cell(mean=3.0).deviation() is None
    with pytest.raises(ValueError, match="not both"):
        Cell(mean=1.0, se=0.1, sd=0.2)
    doc = Document((Table.make("", ["method", "acc (%)"], [["ERM", c], ["MoGE", Cell(mean=60.0, sd=0.0)]]),))
    assert "| ERM      | 51.2 ± 1.0 |" in doc.markdown() and "ERM & 51.2 ± 1.0 \\\\" in doc.latex()
    assert "<td>51.2 ± 1.0</td>" in doc.html()
    rows = list(csv.DictReader(io.StringIO(doc.csv())))
    assert [(r["cell"], r["mean"], r["se"], r["sd"]) for r in rows] == [("51.2 ± 1.0", "51.2", "", "1.0"),
                                                                        ("60.0 ± 0.0", "60.0", "", "0.0")]


def _results_table() -> Table:
    return Table.make("PACS", ["Algorithm", "art_painting", "cartoon", "Avg"],
                      [["ERM / vit|x", Cell(mean=72.46, se=0.44), MISSING, MISSING],
                       ["CORAL", Cell(mean=80.0, se=1.25), Cell(mean=70.0, se=0.0, suffix=" (1/2)"),
                        Cell(mean=75.0)]],
                      [Text("a note")])


def test_csv_latex_and_markdown_come_from_one_table():
    table = _results_table()
    doc = Document((Heading("dgmoe results", 1), Protocol((("Selection", "oracle"),)),
                    Heading("Model selection: oracle", 2), table))
    md, tex, rows = doc.markdown(), doc.latex(), list(csv.DictReader(io.StringIO(doc.csv())))
    assert "| ERM / vit\\|x |   72.5 +/- 0.4 |                  X |     X |" in md
    assert "ERM / vit\\textbar{}x & 72.5 $\\pm$ 0.4 & X & X \\\\" in tex
    assert "\\textbf{art\\_painting}" in tex and "\n\n% a note\n" in tex and "\n\na note\n" in md
    assert rows[0] == {"section": "protocol", "table": "", "row": "Selection", "column": "", "cell": "oracle",
                       "mean": "", "se": "", "sd": ""}
    cells = rows[1:]
    assert len(cells) == 2 * 3  # every cell but the row labels
    assert cells[0] == {"section": "Model selection: oracle", "table": "PACS", "row": "ERM / vit|x",
                        "column": "art_painting", "cell": "72.5 +/- 0.4", "mean": "72.5", "se": "0.4", "sd": ""}
    assert [(r["cell"], r["mean"], r["se"]) for r in cells[3:]] == [
        ("80.0 +/- 1.2", "80.0", "1.2"), ("70.0 +/- 0.0 (1/2)", "70.0", "0.0"), ("75.0", "75.0", "")]
    for c, r in zip((c for row in table.rows for c in row[1:]), cells):  # the numbers each format shows
        assert (float(r["mean"]) if r["mean"] else None, float(r["se"]) if r["se"] else None) == c.numbers()
        assert f" {r['cell'].replace('|', chr(92) + '|')} " in md and c.render(latex=True) in tex
    html = doc.html(id_prefix="r")
    assert '<h3 id="r-pacs">PACS</h3>' in html and '<td class="l">ERM / vit|x</td><td>72.5 +/- 0.4</td>' in html


def test_an_untitled_table_has_no_heading_and_takes_no_anchor():
    untitled = Table.make("", ["a", "b"], [["x", Cell(mean=1.25, decimals=2)]])
    assert untitled.markdown() == untitled.markdown(title=False) == "| a   |    b |\n|:----|-----:|\n| x   | 1.25 |"
    assert "section" not in untitled.latex() and untitled.latex().startswith("\\begin{center}")
    assert untitled.html().startswith('<div class="scroll">')
    doc = Document((Heading("Top", 1), Heading("Part", 2), untitled, Heading("Part", 2), Table.make("T", ["a"], [])))
    assert doc.markdown() == "# Top\n\n## Part\n\n" + untitled.markdown() + "\n\n## Part\n\n### T\n\n| a   |\n|:----|\n"
    assert doc.headings(2, "p") == [("p-part", "Part"), ("p-part-2", "Part")]  # the ids `html` gives them
    page = doc.html(heading_offset=1, id_prefix="p", title=False)
    assert '<h3 id="p-part">Part</h3>' in page and '<h3 id="p-part-2">Part</h3>' in page
    assert '<h4 id="p-t">T</h4>' in page and "Top" not in page


def test_no_markdown_table_is_built_by_hand_or_parsed():
    rule = re.compile(r"""["']\|:?-{2,}""")  # a string literal that starts a rule line such as "|--|" or "|:---"
    hand = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if rule.search(p.read_text())]
    assert not hand, hand
    pandas_markdown = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                       if re.search(r"\.to_markdown\(|import tabulate|from tabulate", p.read_text())]
    assert not pandas_markdown, pandas_markdown
    pyproject = (SRC.parents[1] / "pyproject.toml").read_text()
    assert "tabulate" not in pyproject.split("[project.optional-dependencies]")[0]


def test_every_builder_returns_tables_and_only_the_model_renders_them():
    """Builders return `Table`/`Document` objects and their callers render them: no module but the table model
    calls the Markdown, LaTeX or HTML renderer of `dgmoe.tables`, and nothing reads headings back from rendered
    HTML."""
    renderer = re.compile(r"\b(markdown_table|latex_table|html_table)\(")
    direct = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if renderer.search(p.read_text())}
    assert direct == {"tables.py", "document.py"}, direct
    read_back = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if re.search(r"re\.\w+\(r?['\"]<h\d",
                                                                                    p.read_text())]
    assert not read_back, read_back
