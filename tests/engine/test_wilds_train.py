"""The WILDS datasets end to end on tiny fixtures in their real layouts: `dgmoe train` for a few steps,
WILDS metrics in the records, `dgmoe results` with worst-group selection, sweeps, labels and baselines."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from wilds_fixtures import write_camelyon, write_fmow, write_iwildcam

from dgmoe.selection import worst_group_checkpoint

TINY = ("--model", "vit_micro_patch7_28", "--img-size", "28", "--steps", "3", "--checkpoint-freq", "1",
        "--hparams", '{"batch_size": 4}', "--progress", "none", "--num-threads", "1", "--holdout-fraction", "0.25")
# (4 images per Camelyon17 hospital: 0.25 holds out one, the validation split model selection needs)


def _envs(*envs: int) -> list[str]:
    return [a for e in envs for a in ("--test-envs", str(e))]


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def wilds_runs(tmp_path_factory):
    """FMoW (ERM and GroupDRO on the region domains), FMoW-LAO, iWildCam and Camelyon17 (WILDS' official
    hospitals 1 and 2 held out, and GMoE's leave-one-hospital-out) trained for 3 steps; FMoW, FMoW-LAO and
    iWildCam without --test-envs (their official split), iWildCam's categories.csv as published (y = 99999
    rows)."""
    from dgmoe.cli import run

    root = tmp_path_factory.mktemp("wilds")
    data, runs = root / "data", root / "runs"
    write_fmow(data), write_iwildcam(data), write_camelyon(data)
    for name, dataset, envs, extra in (  # no --test-envs: WILDS' official split (the evaluation splits)
        ("fmow_erm", "FMoW", (), ()),
        ("fmow_dro", "FMoW", (5, 6, 7, 8), ("--algorithm", "GroupDRO")),
        ("lao", "FMoW-LAO", (), ()),
        ("iwildcam", "iWildCam", (), ()),
        ("camelyon", "Camelyon17", (1, 2), ()),
        ("camelyon_loo", "Camelyon17", (2,), ()),
        ("camelyon_h0", "Camelyon17", (), ()),  # hospital 0 held out, the default
    ):
        code = run(["train", "--dataset", dataset, "--data-dir", str(data), *_envs(*envs), *TINY, *extra,
                    "--output-dir", str(runs / name)])
        assert code == 0, name
    return runs


def test_records_carry_wilds_metrics(wilds_runs):
    for name, official in (("fmow_erm", [5, 6, 7, 8]), ("lao", [4, 5, 6, 7]), ("iwildcam", [1, 2, 3, 4])):
        assert _records(wilds_runs / name)[-1]["args"]["test_envs"] == official  # trained without --test-envs
    rec = _records(wilds_runs / "fmow_erm")[-1]
    assert rec["args"]["domains"][5:] == ["id_val", "id_test", "val", "test"]
    assert rec["wilds_val_env"] == 7 and rec["wilds_groups"] == "region"
    for env in (5, 6, 7, 8):
        assert {f"env{env}_acc_avg", f"env{env}_acc_worst_group", f"env{env}_count_region:Asia"} <= set(rec)
        assert sum(rec[f"env{env}_count_region:{r}"] for r in ("Asia", "Europe", "Americas", "Other",
                                                               "Africa", "Oceania")) == 4  # in + out
    assert "env0_acc_avg" not in rec and "env8_f1_macro" not in rec  # training domains: DomainBed's keys only
    iwild = _records(wilds_runs / "iwildcam")[-1]
    assert iwild["wilds_val_env"] == 3 and 0.0 <= iwild["env4_f1_macro"] <= 1.0
    camelyon = _records(wilds_runs / "camelyon")[-1]
    assert camelyon["wilds_val_env"] == 1 and camelyon["wilds_groups"] == "slide"
    assert "wilds_val_env" not in _records(wilds_runs / "camelyon_loo")[-1]  # hospital 1 was trained on


def test_results_show_wilds_columns_with_worst_group_selection(wilds_runs, cli):
    result = cli("results", wilds_runs, "--no-save")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "## Model selection: worst-group validation" in out
    assert "### FMoW: checkpoints chosen by worst-region accuracy on val" in out
    assert "test acc_avg" in out and "test acc_worst_region" in out and "id_test acc_worst_region" in out
    assert "### FMoW-LAO: checkpoints chosen by worst-region accuracy on val_asia" in out and "test_asia acc_avg" in out
    assert "### iWildCam: checkpoints chosen by worst-location_id accuracy on val" in out
    assert "test F1-macro_all" in out and "id_test F1-macro_all" in out
    assert "### Camelyon17: checkpoints chosen by worst-slide accuracy on hospital_1" in out
    assert "hospital_2 acc_worst_slide" in out
    assert "### Camelyon17\n" in out  # the leave-one-hospital-out run in DomainBed's tables (GMoE's protocol)
    # ... with its held-out hospital's worst-slide accuracy at the checkpoint each DomainBed method selects
    assert out.count("### Camelyon17: worst-slide accuracy of the test domain") == 3  # iid, loo, oracle
    h0 = _records(wilds_runs / "camelyon_h0")
    assert h0[-1]["args"]["test_envs"] == [0] and "env0_acc_worst_group" in h0[-1]
    oracle = out[out.index("## Model selection: test-domain"):]
    table = oracle[oracle.index("### Camelyon17: worst-slide"):]
    erm = next(line for line in table.splitlines() if line.startswith("| ERM "))
    assert erm.split("|")[2].strip() == f"{100 * h0[-1]['env0_acc_worst_group']:.1f} +/- 0.0"  # oracle: last step
    # the FMoW ERM cell is the chosen checkpoint's whole-split accuracy on the OOD test split
    recs = _records(wilds_runs / "fmow_erm")
    best = recs[worst_group_checkpoint(recs, ["env7_acc_worst_group"], "env7_acc_avg")]
    table = out[out.index("### FMoW: checkpoints"):]
    erm = next(line for line in table.splitlines() if line.startswith("| ERM "))
    assert f"{100 * best['env8_acc_avg']:.1f} +/- 0.0" in erm and "GroupDRO" in table
    only = cli("results", wilds_runs, "--no-save", "--selection", "worst").output
    assert "training-domain validation" not in only and "### FMoW: checkpoints" in only


def test_sweep_holds_out_the_evaluation_splits():
    from dgmoe.sweep.config import SweepConfig
    from dgmoe.sweep.jobs import build_jobs

    cfg = SweepConfig(datasets=("FMoW", "iWildCam", "Camelyon17"), algorithms=("ERM",), models=("vit",),
                      output_dir="/tmp/x", n_hparams=1, n_trials=1)
    sets = {(j.config.data.dataset, j.config.data.test_envs) for j in build_jobs(cfg)}
    assert {s for d, s in sets if d == "FMoW"} == {(5, 6, 7, 8)}
    assert {s for d, s in sets if d == "iWildCam"} == {(1, 2, 3, 4)}
    assert ("Camelyon17", (1, 2)) in sets and ("Camelyon17", (0,)) in sets  # DomainBed's singles and pairs


def _single_source_run(root: Path, name: str, model: str, label: str | None, kwargs: dict | None = None) -> None:
    run = root / name
    run.mkdir(parents=True)
    args = {"dataset": "PACS", "algorithm": "ERM", "model": model, "test_envs": [1, 2], "hparams_seed": 0,
            "trial_seed": 0, "domains": ["a", "b", "c"], "model_kwargs": kwargs or {}, "label": label}
    rec = {"step": 0, "env0_in_acc": 0.9, "env0_out_acc": 0.8, "env1_in_acc": 0.4, "env1_out_acc": 0.4,
           "env2_in_acc": 0.2, "env2_out_acc": 0.2, "args": args}
    if name == "moe":
        rec.update(env0_out_acc=0.88, env1_in_acc=0.6, env2_in_acc=0.3)
    (run / "results.jsonl").write_text(json.dumps(rec) + "\n")
    (run / "done").write_text("done")


def test_baseline_by_short_name_and_label(tmp_path, cli):
    _single_source_run(tmp_path, "vit", "vit_small_patch16_224", None, {"depth": 6})
    _single_source_run(tmp_path, "moe", "gmoe_small_patch16_224", "GMoE-S (ours)", {"depth": 6})
    result = cli("results", tmp_path, "--single-source", "--baseline", "vit_small_patch16_224", "--no-save")
    assert result.exit_code == 0, result.output
    assert "improvement over ERM / vit_small_patch16_224(depth=6)" in result.output
    moe = next(line for line in result.output.splitlines() if line.startswith("| GMoE-S (ours)"))
    assert [c.strip() for c in moe.split("|")[-3:-1]] == ["10.0%", "50.0%"]  # IID 88 vs 80; OOD 60:40, 30:20
    by_label = cli("results", tmp_path, "--single-source", "--baseline", "GMoE-S (ours)", "--no-save")
    assert by_label.exit_code == 0 and "improvement over ERM / gmoe_small_patch16_224(depth=6)" in by_label.output
    ambiguous = cli("results", tmp_path, "--single-source", "--baseline", "ERM", "--no-save")
    assert ambiguous.exit_code == 2 and "ambiguous" in ambiguous.output


def test_label_names_the_run_without_changing_its_identity():
    from dgmoe.engine.config import RunConfig

    assert RunConfig.from_flat(label="mine").identity() == RunConfig.from_flat().identity()
    assert RunConfig.from_flat(label="mine").flat()["label"] == "mine"  # records carry it as args.label


def test_report_has_the_wilds_tables(wilds_runs, tmp_path, cli):
    result = cli("report", wilds_runs, "--out", tmp_path / "report", "--no-params")
    assert result.exit_code == 0, result.output
    index = (tmp_path / "report" / "index.html").read_text()
    assert "FMoW: checkpoints chosen by worst-region accuracy on val" in index
    assert "hold out several test domains at once" not in index  # every run is in a table


@pytest.mark.parametrize("algorithm", ["D3G", "D3G_WRAP"])
@pytest.mark.parametrize("model,kwargs", [("vit_micro_patch7_28", '{"depth": 2}'),
                                          ("gmoe_micro_patch7_28", '{"depth": 2, "moe_layers": [1]}')])
def test_d3g_trains_on_the_fmow_fixture_with_dense_and_moe_backbones(algorithm, model, kwargs, tmp_path):
    from dgmoe.cli import run

    write_fmow(tmp_path / "data")
    out = tmp_path / "run"
    code = run(["train", "--dataset", "FMoW", "--data-dir", str(tmp_path / "data"), *_envs(5, 6, 7, 8), *TINY,
                "--model", model, "--model-kwargs", kwargs, "--algorithm", algorithm, "--output-dir", str(out)])
    assert code == 0
    last = _records(out)[-1]
    assert (last["loss_aux"] > 0) == model.startswith("gmoe") and "env8_acc_worst_group" in last


def test_a_wilds_run_closes_with_wilds_metric_on_ood_validation_as_results_does(wilds_runs, tmp_path):
    """The closing line of a WILDS run picks the checkpoint `dgmoe results --selection wilds` picks (WILDS'
    metric on the OOD validation split) and prints WILDS' metric of every other held-out split there."""
    import shutil

    from dgmoe.engine.closing import finished_line
    from dgmoe.report.collect import load_records
    from dgmoe.selection import sweep_accs

    for name, title in (("fmow_erm", "acc_worst_region"), ("iwildcam", "F1-macro_all"), ("camelyon", "acc_avg")):
        recs = _records(wilds_runs / name)
        line = finished_line(wilds_runs / name, recs)
        shutil.copytree(wilds_runs / name, tmp_path / name / "run")
        picked = sweep_accs(load_records(tmp_path / name), "wilds")
        assert {int(s) for s in picked["step"]} == {int(picked["step"].iloc[0])}, picked
        step = int(picked["step"].iloc[0])
        args = recs[-1]["args"]
        v = recs[-1]["wilds_val_env"]
        assert f"WILDS {title} " in line and f"at step {step} chosen by WILDS' validation metric on the OOD " \
            f"split {args['domains'][v]}" in line, line
        assert "training-domain validation" not in line and "nan" not in line.lower(), line
        suffix = {"acc_worst_region": "acc_worst_group", "F1-macro_all": "f1_macro", "acc_avg": "acc_avg"}[title]
        rec = next(r for r in recs if r["step"] == step)
        for t in args["test_envs"]:
            if t != v:
                assert f"{args['domains'][t]} {rec[f'env{t}_{suffix}']:.4f}" in line, line
