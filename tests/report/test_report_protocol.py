"""Every table kind `dgmoe results` prints or writes (DomainBed, WILDS, single-source, a recipe's comparison, the
report's HTML) carries the protocol lines; the CSV export holds the numbers the Markdown and LaTeX tables show,
all three rendered from one `Document`."""
import csv
import io
import re

import pytest
from recipe_sweep import write_run

from dgmoe.data.catalogue import get_spec
from dgmoe.recipes import get_recipe
from dgmoe.recipes.compare import comparison_document
from dgmoe.report.collect import load_records
from dgmoe.report.pages import results_section
from dgmoe.report.protocol import protocol_items
from dgmoe.report.results import results_document
from dgmoe.report.single_source import single_source_document

PACS, FMOW = get_spec("PACS").domains, get_spec("FMoW").domains
NAMES = ("Selection", "Steps", "Trials", "Hparams draws", "Pretrained weights", "Dataset version", "dgmoe")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocol")
    for trial in range(2):
        for env in range(4):
            for hseed in range(2):
                write_run(root / "dg" / f"r{trial}{env}{hseed}", "PACS", PACS, "ERM", "vit_small_patch16_224", [env],
                          {env: 0.7 + 0.01 * trial + 0.02 * hseed}, trial_seed=trial, hparams_seed=hseed)
        write_run(root / "wilds" / f"w{trial}", "FMoW", FMOW, "ERM", "vit_small_patch16_224", [5, 6, 7, 8], {},
                  trial_seed=trial, wilds={"acc_avg": 0.5 + 0.01 * trial, "acc_worst_group": 0.3},
                  val_env=FMOW.index("val"))
        for train in range(4):
            write_run(root / "ss" / f"s{trial}{train}", "PACS", PACS, "ERM", "vit_small_patch16_224",
                      [e for e in range(4) if e != train], {e: 0.6 + 0.05 * e for e in range(4)}, trial_seed=trial)
    # a recipe's folder (its manifest): `results --recipe` refuses a folder that holds no run of the recipe
    (root / "dg" / "recipe.json").write_text('{"recipe": "gmoe-table1"}')
    return root


def _kinds(root):
    """(name, Document) of every table kind."""
    main = load_records(root / "dg")
    both = load_records(root, include_unfinished=False)
    both = both[both["test_envs"].map(len) != 3]  # (the single-source runs have their own tables)
    ss = load_records(root / "ss")
    recipe = get_recipe("gmoe-table1")
    return [("domainbed", results_document(main, hparams=True)), ("wilds", results_document(both)),
            ("single-source", single_source_document(ss)), ("recipe", comparison_document(recipe, root / "dg"))]


def _latex_numbers(latex: str) -> list[tuple[float | None, float | None]]:
    """(mean, se) of every data cell of every booktabs table of a LaTeX text, in order, read back from the text."""
    out: list[tuple[float | None, float | None]] = []
    inside = False
    for line in latex.splitlines():
        inside = (inside or line.startswith("\\midrule")) and not line.startswith("\\bottomrule")
        if inside and line.endswith("\\\\"):
            for cell in line[:-2].split(" & ")[1:]:
                found = re.match(r"^([+-]?\d+(?:\.\d+)?)(?:\\%)?(?: \$\\pm\$ (\d+(?:\.\d+)?))?", cell)
                out.append((float(found[1]), float(found[2]) if found[2] else None) if found else (None, None))
    return out


def test_every_table_kind_states_its_protocol(root):
    for kind, document in _kinds(root):
        markdown, latex = document.markdown(), document.latex()
        for name in NAMES:
            assert f"\n- {name}: " in markdown, (kind, name)
            assert f"\n% Protocol: {name}: " in latex, (kind, name)
    html, _ = results_section(load_records(root / "dg"), "all", [])
    assert "Protocol." in html and all(f"{name}: " in html for name in NAMES)


def test_protocol_values(root):
    items = dict(protocol_items(load_records(root / "dg"), "training-domain validation set"))
    assert items["Steps"] == "101" and items["Trials"] == "2 trial seeds (0, 1)"
    assert items["Hparams draws"] == "2 per cell" and items["Pretrained weights"] == "none (trained from scratch)"
    assert items["Dataset version"] == "PACS: image counts unrecorded"  # (these records have no config.json)


def test_csv_and_latex_hold_the_markdown_numbers(root):
    for kind, document in _kinds(root):
        markdown, latex = document.markdown(), document.latex()
        rows = list(csv.DictReader(io.StringIO(document.csv())))
        cells = [r for r in rows if r["section"] != "protocol"]
        assert cells, kind
        assert [r["row"] for r in rows if r["section"] == "protocol"] == list(NAMES)
        as_csv = [(float(r["mean"]) if r["mean"] else None, float(r["se"]) if r["se"] else None) for r in cells]
        assert as_csv == _latex_numbers(latex), kind
        assert any(se is not None for _, se in as_csv) or kind == "single-source", kind
        for r in cells:  # each CSV cell is the Markdown cell, verbatim
            assert f" {r['cell']} " in markdown, (kind, r)


def test_selected_runs_per_domain_and_trial(root):
    document = results_document(load_records(root / "dg"), selection="iid", hparams=True)
    text = document.markdown()
    rows = [r for r in csv.DictReader(io.StringIO(document.csv())) if r["table"] == "PACS: selected runs"]
    assert len(rows) == 4 * 2 * 7  # (one CSV row per cell of the table)
    lines = [line for line in text.split("### PACS: selected runs")[1].split("\n\n")[1].splitlines()[2:]]
    assert len(lines) == 4 * 2  # every domain x trial seed
    for line in lines:  # hparams seed 1 has the better validation accuracy everywhere; its hparams are the defaults
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[3] == "1" and cells[6] == "defaults" and "/dg/r" in cells[7], cells


def test_recipe_results_page(root, cli):
    result = cli("results", root / "dg", "--recipe", "gmoe-table1", "--page", "--csv")
    assert result.exit_code == 0, result.output
    md = (root / "dg" / "results_page" / "index.md").read_text()
    assert md.startswith("# Recipe gmoe-table1: results") and "| GMoE-S/16 " in md and "- Trials: " in md
    assert "### PACS: selected runs" in md and "[log](../" in md
    assert (root / "dg" / "results_page" / "index.html").read_text().count("<table>") >= 3
    assert (root / "dg" / "results_recipe.csv").read_text().startswith("section,table,row,column,cell,mean,se")


def test_pretrained_weights_by_name_and_content(tmp_path):
    import hashlib

    import pandas as pd

    weights = tmp_path / "deit_small.pth"
    weights.write_bytes(b"not really weights")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
    rows = [{"dataset": "PACS", "algorithm": "ERM", "model": "m", "test_envs": (0,), "trial_seed": 0, "hparams_seed": 0,
             "run_dir": str(tmp_path / f"r{k}"), "record": {"args": {"pretrained": path, "steps": 100}}}
            for k, path in enumerate((str(weights), str(tmp_path / "gone.pth")))]
    items = dict(protocol_items(pd.DataFrame(rows), "x"))
    assert items["Pretrained weights"] == f"deit_small.pth (sha256 {digest}); gone.pth (file absent)"
