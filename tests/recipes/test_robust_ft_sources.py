"""The robust fine-tuning recipe's published rows: each number is declared once, in `dgmoe.recipes.sources`, with
its paper, table, row and status; `recipe show` prints them; `dgmoe results --recipe` compares CLIPood's rows on
the held-out domains' `out` split and DomainBed's (DPL's) on `in`; `dgmoe results --test-split` prints either."""
import json
import re
from pathlib import Path

from recipe_sweep import write_run
from recipe_tables import comparison_row

from dgmoe.data.catalogue import get_spec
from dgmoe.recipes import get_recipe, sources
from dgmoe.recipes.base import ACROSS
from dgmoe.recipes.robust_ft import OPENAI_B16

ROOT = Path(__file__).resolve().parents[2]
PACS = get_spec("PACS").domains
RECIPE = get_recipe("clip-robust-domainbed")

#: every entered number as the papers print it (WiSE-FT: IN, V2, R, Sketch, A, ObjectNet, avg of the 5 shifts;
#: DomainBed's five then their average; FLYP: ID / avg of the 5 shifts, or ID / OOD), with status and table
EXPECTED = {
    "WISE_FT_ZERO_SHOT": ("68.3 61.9 77.6 48.2 49.8 53.0 58.1", "primary", "Table 8"),
    "WISE_FT_FINE_TUNED": ("81.3 70.9 65.6 46.3 36.7 49.6 53.8", "primary", "Table 8"),
    "WISE_FT_HALF": ("81.7 72.8 78.7 53.9 52.2 57.3 63.0", "primary", "Table 8"),
    "WISE_FT_OPTIMAL": ("82.6 73.2 80.1 54.1 54.6 57.7 63.5", "primary", "Table 8"),
    "CLIPOOD_ROW": ("97.3 85.0 87.0 60.4 63.5 78.6", "quoted", "Table 1"),
    "CLIPOOD_ERM": ("96.1 83.0 83.3 60.9 59.9 76.6", "quoted", "Table 1"),
    "CLIPOOD_ZERO_SHOT": ("96.2 81.7 82.0 33.4 57.5 70.2", "quoted", "Table 1"),
    "DPL_ZERO_SHOT": ("96.1 82.3 82.3 34.1 -", "primary", "Table 1"),
    "FLYP_ZERO_SHOT": ("68.3 58.7", "quoted", "Table 1"),
    "FLYP_FINE_TUNED": ("81.3 54.9", "quoted", "Table 1"),
    "FLYP_LP_FT": ("81.7 60.3", "quoted", "Table 1"),
    "FLYP_IWILDCAM": ("52.2 35.6", "quoted", "Table 1"),
    "FLYP_FMOW": ("68.6 41.3", "quoted", "Table 1"),
}


def _declaration(name: str, text: str) -> str:
    """The text of `NAME = Source(...)` in sources.py, up to the next top-level statement."""
    start = re.search(rf"^{name} = Source\(", text, re.MULTILINE)
    assert start, name
    end = re.search(r"\n\S", text[start.end():])
    return text[start.start(): start.end() + (end.start() if end else len(text))]


def test_each_entered_number_is_its_source_line_in_sources_py():
    """Each row's numbers: the expected ones, declared once in sources.py (in their own Source's declaration),
    entered into the recipe's cells in order, and quoted by no README or doc."""
    text = (ROOT / "src/dgmoe/recipes/sources.py").read_text()
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    cited = {id(r.source): r.source for r in RECIPE.rows if r.source is not None}
    assert {id(getattr(sources, n)) for n in EXPECTED} == set(cited)  # every cited source is checked here
    for name, (numbers, status, table) in EXPECTED.items():
        source = getattr(sources, name)
        assert (source.numbers, source.status) == (numbers, status) and table in source.table, name
        assert text.count(f'"{numbers}"') == 1 and f'"{numbers}"' in _declaration(name, text), name
        assert bool(source.quoted_in) == (status == "quoted"), name
        printed = [float(t) for t in numbers.split() if t != "-"]
        for row in (r for r in RECIPE.rows if r.source is source):
            assert [c.value for c in row.cells] == printed, row.label
        assert " ".join(numbers.split()[:3]) not in docs, (name, "quoted in the README or docs")


def test_recipe_show_prints_every_number_with_paper_table_row_and_status(cli):
    result = cli("recipe", "show", "clip-robust-domainbed")
    assert result.exit_code == 0, result.output
    out = result.output
    for name in EXPECTED:
        source = getattr(sources, name)
        assert source.text in out and source.short in out, name
        for token in (t for t in source.numbers.split() if t != "-"):
            assert token in out
    assert "quoted (read in SBGen Table 1, the TransDG README, QT-DoG and thuml/CLIPood issue #10)" in out
    assert "primary" in out and "macro-F1" in out and "23.7k images" in out
    flyp = next(line for line in out.splitlines() if line.startswith("  FLYP, ImageNet -> shifts:"))
    assert "could not be verified" in flyp
    assert "Effective robustness: no published linear fit is shipped" in out


def test_cited_rows_name_their_test_split():
    """CLIPood's rows (its zero-shot and ERM too) on `out`, DPL's on `in`, ImageNet's on whole sets."""
    splits = {r.label: {c.split for c in r.cells} for r in RECIPE.rows if r.source is not None}
    for row in RECIPE.rows:
        if row.source is None:
            continue
        expected = {"out"} if row.source.paper == sources.CLIPOOD else (
            {"in"} if row.source is sources.DPL_ZERO_SHOT else {"all"})
        assert splits[row.label] == expected, row.label
    assert any(c.dataset == ACROSS for c in RECIPE.row("CLIPood (ViT-B/16)").cells)


def _zero_shot_runs(part: Path, in_acc: float, out_acc: float) -> None:
    """Zero-shot PACS runs (every domain held out, 3 trials): the held-out domain's in and out accuracies differ."""
    for trial in range(3):
        for env in range(len(PACS)):
            folder = write_run(part / f"run_{trial}_{env}", "PACS", PACS, "ERM", OPENAI_B16, [env], {env: in_acc},
                               trial_seed=trial)
            lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
            for record in lines:
                record[f"env{env}_out_acc"] = out_acc * record[f"env{env}_in_acc"] / in_acc
            (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_clipood_rows_compare_on_out_and_dpl_s_on_in(cli, tmp_path):
    """One zero-shot sweep, two published rows: CLIPood's reads the held-out domains' out accuracy (80%), DPL's
    the in accuracy (90%), and each table row says which split and which source."""
    _zero_shot_runs(tmp_path / "zero-shot", in_acc=0.90, out_acc=0.80)
    result = cli("results", tmp_path, "--recipe", "clip-robust-domainbed", "--no-save")
    assert result.exit_code == 0, result.output
    clipood = comparison_row(result.output, "PACS", "zero-shot CLIP (ViT-B/16), CLIPood's")
    assert (clipood["test split"], clipood["paper"], clipood["obtained"], clipood["diff"]) == (
        "out", "96.2", "80.0 +/- 0.0", "-16.2")
    assert "quoted in SBGen Table 1" in clipood["source"]
    dpl = comparison_row(result.output, "PACS", "zero-shot CLIP (ViT-B/16), DPL's")
    assert (dpl["test split"], dpl["paper"], dpl["obtained"], dpl["diff"]) == ("in", "96.1", "90.0 +/- 0.0", "-6.1")
    assert "(primary)" in dpl["source"]
    # the mean over the datasets needs every dataset's average: X until the other four are run
    assert comparison_row(result.output, ACROSS, "zero-shot CLIP (ViT-B/16), CLIPood's")["obtained"] == "X"
    assert "out = each held-out domain's 'out' split (20% of its images, CLIPood's test split)" in result.output


def test_results_test_split_prints_the_other_split_and_says_which(cli, tmp_path):
    _zero_shot_runs(tmp_path / "zero-shot", in_acc=0.90, out_acc=0.80)
    default = cli("results", tmp_path, "--no-save", "--selection", "iid")
    assert default.exit_code == 0, default.output
    assert "'in' split (80% of its images, DomainBed's test split)" in default.output
    assert "90.0 +/- 0.0" in default.output and "80.0 +/- 0.0" not in default.output
    out = cli("results", tmp_path, "--no-save", "--test-split", "out")
    assert out.exit_code == 0, out.output
    assert "'out' split (20% of its images, CLIPood's test split)" in out.output
    assert "80.0 +/- 0.0" in out.output and "90.0 +/- 0.0" not in out.output
    assert "Test-domain validation (oracle) is left out" in out.output and "oracle)\n" not in out.output
    refused = cli("results", tmp_path, "--no-save", "--test-split", "out", "--selection", "oracle")
    assert refused.exit_code == 2 and "--selection oracle" in refused.output and "Traceback" not in refused.output
    recipe = cli("results", tmp_path, "--no-save", "--test-split", "out", "--recipe", "clip-robust-domainbed")
    assert recipe.exit_code == 2 and "test splits" in recipe.output


def test_test_split_keeps_training_domains_and_pair_runs():
    """Only a single held-out domain's `in` accuracy is replaced: training-domain validation reads the training
    domains' out splits as before, and leave-one-domain-out the pair runs' in splits."""
    import pandas as pd

    from dgmoe.report.test_split import with_test_split

    records = pd.DataFrame({"test_envs": [(0,), (0, 1)], "env0_in_acc": [0.9, 0.9], "env0_out_acc": [0.8, 0.8],
                            "env1_in_acc": [0.7, 0.7], "env1_out_acc": [0.6, 0.6]})
    out = with_test_split(records, "out")
    assert list(out["env0_in_acc"]) == [0.8, 0.9] and list(out["env1_in_acc"]) == [0.7, 0.7]
    assert list(out["env0_out_acc"]) == [0.8, 0.8] and with_test_split(records, "in") is records


def test_wise_ft_rows_compare_the_soups_at_alpha_half_and_each_column_s_best_alpha(cli, tmp_path):
    """WiSE-FT Table 8's rows read the soup part's runs: alpha=0.5 its soup at 0.5, "optimal alpha" each column's
    best over the grid (ImageNet at alpha 1, every shift at 0.5 here)."""
    spec = get_spec("ImageNetShifts")
    domains, held = spec.domains, [spec.domains.index(d) for d in spec.eval_domains]
    for k in range(11):
        alpha = k / 10
        folder = write_run(tmp_path / "imagenet-wise-ft" / f"soup_{k}", "ImageNetShifts", domains,
                           f"ERM (WiSE-FT alpha={alpha:g})", OPENAI_B16, held, {})
        lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        for record in lines:
            record["n_envs"] = len(domains)
            for i in held:
                shift = 0.5 + 0.2 * alpha * (1 - alpha)
                record[f"env{i}_acc_all"] = 0.7 + 0.1 * alpha if domains[i] == "ImageNet-val" else shift
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = cli("results", tmp_path, "--recipe", "clip-robust-domainbed", "--no-save")
    assert result.exit_code == 0, result.output
    half = comparison_row(result.output, "ImageNetShifts", "WiSE-FT alpha=0.5, ImageNet -> shifts")
    assert (half["ImageNet-val: obtained"], half["ImageNet-R: obtained"], half["Avg shifts: obtained"]) == (
        "75.0 +/- 0.0", "55.0 +/- 0.0", "55.0 +/- 0.0")
    assert (half["ImageNet-val: paper"], half["Avg shifts: paper"], half["test split"]) == ("81.7", "63.0", "all")
    best = comparison_row(result.output, "ImageNetShifts", "WiSE-FT optimal alpha per column, ImageNet -> shifts")
    assert (best["ImageNet-val: obtained"], best["ObjectNet: obtained"], best["Avg shifts: diff"]) == (
        "80.0 +/- 0.0", "55.0 +/- 0.0", "-8.5")
    assert "23.7k images" in result.output  # FLYP's ObjectNet copy, said beside its comparison
