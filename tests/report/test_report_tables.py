"""Loading records, results tables against golden files, and the `dgmoe results` CLI.

The sweep below is written by the test; every cell's value is chosen so it can be checked by hand
(see the comments). Regenerate the golden files with DGMOE_UPDATE_GOLDEN=1, then read them.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
from pathlib import Path

import pytest

from dgmoe.report.collect import RecordError, load_records
from dgmoe.report.results import results_document, results_tables

GOLDEN = Path(__file__).parents[1] / "golden"
PACS = ["art_painting", "cartoon", "photo", "sketch"]

# PACS single-test-env runs: 2 hparams x 2 checkpoints; the test domain's in accuracy sits at four points.
#   IID   -> (hparams 1, step 0)    training-domain out accs: h0 .5/.6, h1 .7/.65
#   oracle-> (hparams 0, step 100)  test-domain out acc at the last step: h0 .6, h1 .5
#   LOO   -> (hparams 0, step 0)    pair runs' validation accs: h0 .45/.4, h1 .35/.2
# test acc = base[model][point][t] + trial offset; (h1, step 100) holds a decoy 0.99.
BASE = {
    "vit_tiny_patch16_224": [0.2, 0.5, 0.8, 0.5],
    "gmoe_tiny_patch16_224": [0.3, 0.6, 0.9, 0.5],
}
SHIFT = {"iid": 0.0, "oracle": -0.05, "loo": 0.02}
TRIAL = {"vit_tiny_patch16_224": [-0.1, 0.0, 0.1], "gmoe_tiny_patch16_224": [0.0, 0.03, 0.06]}


def write_run(run: Path, args: dict, checkpoints: list[tuple[int, dict]], n_envs: int, done=True) -> None:
    run.mkdir(parents=True)
    with open(run / "results.jsonl", "w") as f:
        for step, accs in checkpoints:
            rec = {"step": step, "epoch": step / 10, "loss": 0.1, "step_time": 0.01, "mem_gb": 0.0}
            for i in range(n_envs):
                rec[f"env{i}_in_acc"] = accs.get(f"env{i}_in_acc", 0.0)
                rec[f"env{i}_out_acc"] = accs.get(f"env{i}_out_acc", 0.0)
            f.write(json.dumps({**rec, "hparams": {"lr": 5e-5}, "args": args}) + "\n")
    if done:
        (run / "done").write_text("done")


def _args(dataset, algorithm, model, test_envs, hseed, trial, run, domains=None):
    out = dict(dataset=dataset, algorithm=algorithm, model=model, test_envs=list(test_envs), hparams_seed=hseed,
               trial_seed=trial, seed=hseed * 100 + trial, output_dir=str(run), steps=100)
    return out if domains is None else {**out, "domains": domains}


def _pacs_single(model: str, t: int, hseed: int, trial: int) -> list[tuple[int, dict]]:
    def test_acc(point):
        return round(BASE[model][t] + SHIFT[point] + TRIAL[model][trial], 4)
    train_out = {0: (0.5, 0.6), 1: (0.7, 0.65)}[hseed]
    test_out = {0: (0.1, 0.6), 1: (0.1, 0.5)}[hseed]
    test_in = {0: (test_acc("loo"), test_acc("oracle")), 1: (test_acc("iid"), 0.99)}[hseed]
    out = []
    for k, step in enumerate([0, 100]):
        accs = {f"env{j}_out_acc": train_out[k] for j in range(4) if j != t}
        accs.update({f"env{t}_out_acc": test_out[k], f"env{t}_in_acc": test_in[k]})
        out.append((step, accs))
    return out


def make_sweep(root: Path) -> None:
    """PACS (two models; pair runs for LOO only for GMoE) nested one level, VLCS (gaps) nested three."""
    for model, hseed, trial in itertools.product(BASE, [0, 1], [0, 1, 2]):
        for t in range(4):
            run = root / "pacs" / f"{model}_t{t}_h{hseed}_s{trial}"
            write_run(run, _args("PACS", "ERM", model, [t], hseed, trial, run, PACS),
                      _pacs_single(model, t, hseed, trial), 4)
        if model.startswith("gmoe"):
            val = {0: (0.45, 0.4), 1: (0.35, 0.2)}[hseed]
            for a, b in itertools.combinations(range(4), 2):
                run = root / "pacs" / f"{model}_t{a}{b}_h{hseed}_s{trial}"
                write_run(run, _args("PACS", "ERM", model, [a, b], hseed, trial, run, PACS),
                          [(s, {f"env{a}_in_acc": v, f"env{b}_in_acc": v}) for s, v in zip([0, 100], val)], 4)
    # VLCS, no domain names, one hparams seed: IID picks step 0 (train out .7 > .6), oracle the last step.
    # ERM: trial 0 has every test env (.6 .7 .8 .9), trial 1 lacks env3 (.7 .8 1.0); CORAL: one run.
    vlcs = {("ERM", 0): [0.6, 0.7, 0.8, 0.9], ("ERM", 1): [0.7, 0.8, 1.0], ("CORAL", 0): [0.5]}
    for (alg, trial), accs in vlcs.items():
        for t, acc in enumerate(accs):
            run = root / "vlcs" / "deep" / "er" / f"{alg}_t{t}_s{trial}"
            train = {f"env{j}_out_acc": 0.7 for j in range(4) if j != t}
            last = {f"env{j}_out_acc": 0.6 for j in range(4) if j != t}
            write_run(run, _args("VLCS", alg, "vit_tiny_patch16_224", [t], 0, trial, run),
                      [(0, {**train, f"env{t}_in_acc": acc}),
                       (100, {**last, f"env{t}_out_acc": 0.5, f"env{t}_in_acc": round(acc - 0.1, 4)})], 4)
    # an unfinished run (skipped by default) and a finished one whose last line was cut mid-write
    write_run(root / "vlcs" / "running", _args("VLCS", "ERM", "vit_tiny_patch16_224", [3], 0, 1, "x"),
              [(0, {"env3_in_acc": 0.0})], 4, done=False)
    with open(root / "vlcs" / "deep" / "er" / "ERM_t0_s0" / "results.jsonl", "a") as f:
        f.write('{"step": 200, "env0_in_acc": 0.')


@pytest.fixture(scope="module")
def sweep_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    make_sweep(root)
    return root


@pytest.fixture(scope="module")
def records(sweep_root):
    with pytest.warns(UserWarning) as caught:
        frame = load_records(sweep_root)
    messages = [str(w.message) for w in caught]
    assert any("ERM_t0_s0" in m and "trailing" in m for m in messages)
    assert any("unfinished" in m and "running" in m for m in messages)
    return frame


def check_golden(text: str, name: str) -> None:
    path = GOLDEN / name
    if os.environ.get("DGMOE_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path}; rerun with DGMOE_UPDATE_GOLDEN=1 and review"


def test_load_records_columns(records):
    # 2 models x 2 hparams x 3 trials x 4 envs x 2 ckpts + GMoE pairs 2 x 3 x 6 x 2 + VLCS 8 runs x 2
    assert len(records) == 96 + 72 + 16
    row = records[(records["dataset"] == "PACS") & (records["test_envs"] == (2,))].iloc[0]
    assert row["domains"] == tuple(PACS) and row["n_envs"] == 4 and row["done"]
    assert isinstance(row["record"], dict) and row["record"]["args"]["dataset"] == "PACS"
    for col in ("step", "loss", "env3_out_acc", "algorithm", "model", "hparams_seed", "trial_seed", "run_dir"):
        assert col in records.columns
    assert records["domains"][records["dataset"] == "VLCS"].isna().all()


def test_include_unfinished(sweep_root):
    with pytest.warns(UserWarning, match="trailing"):
        frame = load_records(sweep_root, include_unfinished=True)
    assert (~frame["done"]).sum() == 1


def test_corrupt_middle_line_is_an_error(tmp_path):
    run = tmp_path / "r"
    write_run(run, _args("VLCS", "ERM", "", [0], 0, 0, run), [(0, {}), (1, {})], 4)
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("\n".join([lines[0][:20], lines[1]]) + "\n")
    with pytest.raises(RecordError, match=r"results.jsonl:1: not valid JSON"):
        load_records(tmp_path)


def test_missing_args_field_is_an_error(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.jsonl").write_text(json.dumps({"step": 0, "args": {"dataset": "X"}}) + "\n")
    (tmp_path / "r" / "done").write_text("done")
    with pytest.raises(RecordError, match=r"r/results.jsonl:1: args lack \['algorithm'"):
        load_records(tmp_path)


def test_hand_computed_cells(records):
    text = results_tables(records, "iid")
    # ViT art_painting: trials 0.1, 0.2, 0.3 -> DomainBed's pinned "20.0 +/- 4.7"
    assert "| ERM / vit_tiny_patch16_224  |   20.0 +/- 4.7 |" in text
    # GMoE: (.3 .6 .9 .5) + (0, .03, .06): 33.0 63.0 93.0 53.0 +/- 1.4, Avg 60.5
    assert "33.0 +/- 1.4 | 63.0 +/- 1.4 | 93.0 +/- 1.4 | 53.0 +/- 1.4 |  60.5 |" in text
    # VLCS ERM: (.6, .7) (.7, .8) (.8, 1.0) (.9) -> 65.0 +/- 3.5, 75.0 +/- 3.5, 90.0 +/- 7.1, 90.0 +/- 0.0
    # (a one-model table names its model too: no row reads as the bare algorithm)
    assert ("| ERM / vit_tiny_patch16_224   | 65.0 +/- 3.5 | 75.0 +/- 3.5 | 90.0 +/- 7.1 | 90.0 +/- 0.0 |  80.0 |"
            in text)
    assert ("| CORAL / vit_tiny_patch16_224 | 50.0 +/- 0.0 |            X |            X |            X |     X |"
            in text)
    loo = results_tables(records, "loo")
    assert "| ERM / vit_tiny_patch16_224  |              X |" in loo
    assert "35.0 +/- 1.4 | 65.0 +/- 1.4 | 95.0 +/- 1.4 | 55.0 +/- 1.4 |  62.5 |" in loo
    oracle = results_tables(records, "oracle")
    assert "|   15.0 +/- 4.7 | 45.0 +/- 4.7 | 75.0 +/- 4.7 | 45.0 +/- 4.7 |  45.0 |" in oracle


def test_averages_of_incomplete_trial_seeds(records):
    # VLCS ERM under IID: trial 0 averages .6 .7 .8 .9 = .75; trial 1 lacks env3. As DomainBed, it averages
    # the domains it has (.7 .8 1.0 -> .8333): 79.2 +/- 2.9, and CORAL's lone env0 run counts (50.0). Each such
    # cell says over how few domains a seed averaged, and the row's Avg that it is partial.
    text = results_tables(records, "iid")
    assert "| ERM / vit_tiny_patch16_224   | 50.0 +/- 4.7 | 79.2 +/- 2.9 (3/4) | 64.6 (partial) |" in text
    assert "| CORAL / vit_tiny_patch16_224 |            X | 50.0 +/- 0.0 (1/4) |              X |" in text
    assert "(k/n): a trial seed of this cell holds out only k of the dataset's n domains" in text
    # complete_trials leaves trial 1 out (75.0 +/- 0.0) and CORAL has no complete seed (X)
    strict = results_tables(records, "iid", complete_trials=True)
    assert "| ERM / vit_tiny_patch16_224   | 50.0 +/- 4.7 | 75.0 +/- 0.0 |  62.5 |" in strict
    assert "| CORAL / vit_tiny_patch16_224 |            X |            X |     X |" in strict
    assert "(k/n)" not in strict and "(partial)" not in strict


def test_counts_read_in_the_right_number(records):
    single = records[records["test_envs"].map(len) == 1]
    one = single[single["run_dir"] == single["run_dir"].iloc[0]].head(1)
    assert "1 record from 1 run." in results_tables(one, "iid")


def test_markdown_golden(records):
    check_golden(results_tables(records, "all"), "results_tables.md")


def test_latex_golden(records):
    check_golden(results_tables(records, "all", latex=True), "results_tables.tex")


def test_markdown_latex_and_csv_come_from_one_document(records):
    """The golden Markdown and LaTeX and the CSV export are renderings of one `Document`: each CSV row is a cell
    of its tables, with the numbers the cell prints in both formats."""
    document = results_document(records, "all")
    check_golden(document.markdown(), "results_tables.md")
    check_golden(document.latex(), "results_tables.tex")
    rows = [r for r in csv.DictReader(io.StringIO(document.csv())) if r["section"] != "protocol"]
    cells = [(section, table, row, column, c) for section, table in document.tables() for row in table.rows
             for column, c in zip(table.columns[1:], row[1:])]
    assert len(rows) == len(cells) > 0
    for r, (section, table, row, column, c) in zip(rows, cells):
        assert (r["section"], r["table"], r["row"], r["column"]) == (section, table.title, row[0].text, column)
        mean, se = c.numbers()
        assert (r["cell"], r["mean"], r["se"]) == (c.render(), "" if mean is None else repr(mean),
                                                   "" if se is None else repr(se))
        if mean is not None:  # the same number in the Markdown and the LaTeX the golden files hold
            assert c.render().startswith(f"{mean:.1f}") and c.render(latex=True).startswith(f"{mean:.1f}")
    assert any(r["se"] for r in rows) and any(r["cell"] == "X" for r in rows)


def test_the_contents_of_the_html_results_come_from_the_document(records):
    """The report's table of contents lists each selection method's heading with the anchor the page gives it,
    taken from the `Document` (not read back from the HTML)."""
    from dgmoe.report.pages import results_section

    document = results_document(records, "all")
    body, contents = results_section(records, "all", [])
    assert contents == document.headings(2, id_prefix="results", title=False)
    shown = re.findall(r'<h3 id="([^"]+)">([^<]*)</h3>', body)  # (the test reads the page to check it)
    assert len(contents) >= 3 and contents == [(a, t) for a, t in shown]
    assert [t for _, t in contents] == [b.text for b in document.blocks if getattr(b, "level", 0) == 2]


def test_cli_prints_and_writes(sweep_root, tmp_path, cli):
    result = cli("results", sweep_root, "--selection", "iid")
    assert result.exit_code == 0, result.output
    assert "## Model selection: training-domain validation set" in result.output
    assert "leave-one-domain-out" not in result.output
    assert "warning: " in result.output and "wrote " in result.output  # mixed stderr
    assert "20.0 +/- 4.7" in (sweep_root / "results.md").read_text()
    result = cli("results", sweep_root, "--selection", "iid", "--complete-trials", "--no-save")
    assert result.exit_code == 0 and "| 75.0 +/- 0.0 |  62.5 |" in result.output
    result = cli("results", sweep_root, "--latex", "--no-save")
    assert result.exit_code == 0 and "\\toprule" in result.output
    assert not (sweep_root / "results.tex").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("results", empty)
    assert result.exit_code == 2 and "no records" in result.output
    result = cli("results", sweep_root, "--baseline", "vit")
    assert result.exit_code == 2 and "--single-source" in result.output


def test_model_overrides_make_separate_rows(tmp_path):
    # two ablations of one backbone are two rows, not one run seen twice
    for over, acc in [({}, 0.4), ({"model_kwargs": {"top_k": 2, "num_experts": 4}, "patch_size": 8}, 0.6)]:
        run = tmp_path / f"r{acc}"
        args = {**_args("PACS", "ERM", "gmoe_tiny_patch16_224", [0], 0, 0, run), "img_size": None, **over}
        write_run(run, args, [(0, {"env0_in_acc": acc})], 4)
    text = results_tables(load_records(tmp_path), "oracle")
    assert re.search(r"\| ERM / gmoe_tiny_patch16_224 +\| 40.0 \+/- 0.0 \|", text)
    assert "| ERM / gmoe_tiny_patch16_224(num_experts=4, patch_size=8, top_k=2) | 60.0 +/- 0.0 |" in text


def test_peft_modes_of_one_backbone_make_separate_rows(tmp_path):
    # a linear probe, an adapter run and full fine-tuning of one tower are three rows (the PEFT knobs left at
    # their defaults are not named), not one run seen three times
    peft = [({}, 0.4), ({"peft": "linear", "peft_rank": 8}, 0.5), ({"peft": "adapter_experts", "peft_top_k": 2}, 0.6)]
    for over, acc in peft:
        run = tmp_path / f"r{acc}"
        args = {**_args("PACS", "ERM", "vit_tiny_patch16_224", [0], 0, 0, run), "img_size": None, **over}
        write_run(run, args, [(0, {"env0_in_acc": acc})], 4)
    text = results_tables(load_records(tmp_path), "oracle")
    assert re.search(r"\| ERM / vit_tiny_patch16_224 +\| 40.0 \+/- 0.0 \|", text)
    assert re.search(r"\| ERM / vit_tiny_patch16_224\(peft='linear'\) +\| 50.0 \+/- 0.0 \|", text)
    assert "| ERM / vit_tiny_patch16_224(peft='adapter_experts', peft_top_k=2) | 60.0 +/- 0.0 |" in text
