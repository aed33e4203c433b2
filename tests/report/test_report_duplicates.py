"""A recipe folder whose parts trained one configuration several times (the smoke scale maps several backbones
onto one stand-in) tabulates: `dgmoe results` and `dgmoe report` say so in a warning and print every table."""
import re

from recipe_sweep import write_run

DEBUG = ("0", "1", "2")
MICRO = "vit_micro_patch7_28"


def _smoke_like(root):
    """gmoe-table1's smoke layout: ERM on the micro ViT in three parts (one job id), other rows once."""
    for part in ("vit-gmoe", "resnet50", "resnet50-large"):
        write_run(root / part / "0f376cce", "Debug28", DEBUG, "ERM", MICRO, [0], {0: 0.3, 1: 0.6, 2: 0.7})
    write_run(root / "vit-gmoe" / "gmoe", "Debug28", DEBUG, "ERM", "gmoe_micro_patch7_28", [0], {0: 0.7})
    for algorithm in ("CORAL", "IRM"):
        write_run(root / "resnet50" / algorithm, "Debug28", DEBUG, algorithm, MICRO, [0], {0: 0.5})


def test_results_warn_about_duplicates_and_print_every_table(cli, tmp_path):
    root = tmp_path / "gmoe-table1-smoke"
    _smoke_like(root)
    result = cli("results", root, "--no-save")
    assert result.exit_code == 0, result.output
    warning = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "1 run configuration appears in several run dirs" in warning[0]
    assert "leave out 2 duplicate run dirs" in warning[0] and "{" not in warning[0]  # no Python repr
    assert result.output.count("### Debug28") == 3 and result.output.count("### Averages") == 3
    for row in ("ERM / vit_micro_patch7_28", "ERM / gmoe_micro_patch7_28", "CORAL / vit_micro_patch7_28",
                "IRM / vit_micro_patch7_28"):
        assert result.output.count(f"| {row} ") == 6, row  # each selection: its dataset table and the Averages
    assert "30.0 +/- 0.0" in result.output  # the ERM cell, once, from one of the identical runs


def test_report_over_the_parent_folder_shows_every_table(cli, tmp_path):
    _smoke_like(tmp_path / "recipes" / "gmoe-table1-smoke")
    write_run(tmp_path / "recipes" / "other" / "r", "Debug28", DEBUG, "ERM", "gmoe_micro_patch7_28", [1], {1: 0.8})
    result = cli("report", tmp_path / "recipes", "--no-params")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "recipes" / "report" / "index.html").read_text()
    assert 'class="problem"' not in page and "could not be computed" not in page
    assert "appears in several run dirs" in page
    assert page.count(">Averages</h4>") == 3 and page.count(">Debug28</h4>") == 3  # every method's tables
    assert len(re.findall(r"<td[^>]*>ERM / vit_micro_patch7_28</td>", page)) == 6


def test_the_report_benchmark_command_runs(capsys):
    """`benchmarks/report_index.py` (run by hand over 2,000 runs; docs/benchmarks.md) on a few runs: it reports
    when the index was on disk and when the report was done. No verdict on speed."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "report_index.py"
    spec = importlib.util.spec_from_file_location("report_index", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    marks = module.main(["--runs", "16", "--pages", "none"])
    assert 0 < marks["index_cpu_s"] <= marks["total_cpu_s"]
    assert "16 fake runs" in capsys.readouterr().out


def _with_hparams(folder, given):
    import json

    lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    for record in lines:
        record["args"]["hparams"] = given
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_runs_given_other_explicit_hparams_are_two_runs_not_duplicates(cli, tmp_path):
    """Two runs of one hparams seed given other `--hparams` are two draws: selection picks the better one by its
    validation accuracy; the same `--hparams` (written either way: DomainBed's JSON text, dgmoe's object) is one
    configuration twice, and the duplicate rule keeps one."""
    root = tmp_path / "sweep"
    _with_hparams(write_run(root / "low", "Debug28", DEBUG, "ERM", MICRO, [0], {0: 0.2, 1: 0.4, 2: 0.4}),
                  {"lr": 1e-5})
    _with_hparams(write_run(root / "high", "Debug28", DEBUG, "ERM", MICRO, [0], {0: 0.9, 1: 0.8, 2: 0.8}),
                  '{"lr": 0.0001}')
    result = cli("results", root, "--no-save", "--selection", "iid")
    assert result.exit_code == 0 and "several run dirs" not in result.output, result.output
    assert "| ERM " in result.output and "90.0 +/- 0.0" in result.output  # the better draw (validation 80 vs 40)
    _with_hparams(write_run(root / "again", "Debug28", DEBUG, "ERM", MICRO, [0], {0: 0.5, 1: 0.5, 2: 0.5}),
                  {"lr": 0.0001})
    result = cli("results", root, "--no-save", "--selection", "iid")
    assert result.exit_code == 0 and "1 run configuration appears in several run dirs" in result.output
    assert '--hparams {"lr": 0.0001}' in result.output  # (the first dir, sorted, is kept: again/)
    assert "50.0 +/- 0.0" in result.output and "90.0 +/- 0.0" not in result.output
