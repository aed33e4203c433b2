"""Single-source DG tables (GMoE Table 3 / 12) on records written here.

The "trained on painting" runs carry GMoE Table 3's accuracies, so the improvement columns must come
out as the paper prints them: ResNet101 1.1% / 12.4%, GMoE-S/16 10.5% / 42.3% over ResNet50. (ViT-S/16
gives 38.2%, where the paper prints 38.6%; its inputs are rounded to 0.1, and Quick at 2.2% is tiny.)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dgmoe.report.collect import load_records
from dgmoe.report.single_source import (
    improvement,
    ood_improvement,
    single_source_accs,
    single_source_table,
)

GOLDEN = Path(__file__).parents[1] / "golden"
DOMAINS = ["clipart", "infograph", "painting", "quickdraw", "real", "sketch"]
TABLE3 = {  # clipart, infograph, painting (IID), quickdraw, real, sketch
    "resnet50": [37.1, 12.9, 62.7, 2.2, 49.3, 33.3],
    "resnet101": [40.5, 13.1, 63.4, 3.1, 51.2, 35.4],
    "vit_small_patch16_224": [42.7, 15.9, 69.0, 5.0, 56.4, 37.0],
    "gmoe_small_patch16_224": [43.5, 16.1, 69.3, 5.3, 56.4, 38.0],
}


def write_run(root: Path, model: str, test_envs: list[int], hseed: int, trial: int, ckpts: list[dict]) -> None:
    run = root / f"{model}_{'-'.join(map(str, test_envs))}_h{hseed}_s{trial}"
    run.mkdir(parents=True)
    args = dict(dataset="DomainNet", algorithm="ERM", model=model, test_envs=test_envs, hparams_seed=hseed,
                trial_seed=trial, seed=0, output_dir=str(run), steps=200, domains=DOMAINS)
    with open(run / "results.jsonl", "w") as f:
        for step, accs in enumerate(ckpts):
            rec = {"step": 100 * step, "loss": 1.0}
            for i in range(6):
                rec[f"env{i}_in_acc"] = accs.get(f"env{i}_in_acc", 0.0)
                rec[f"env{i}_out_acc"] = accs.get(f"env{i}_out_acc", 0.0)
            f.write(json.dumps({**rec, "hparams": {}, "args": args}) + "\n")
    (run / "done").write_text("done")


def trained_on(train: int, iid: float, ood: list[float]) -> dict:
    """Accuracies of a run trained on domain `train`; other domains' out splits hold a decoy 0.01."""
    others = [e for e in range(6) if e != train]
    accs = {f"env{e}_in_acc": a for e, a in zip(others, ood)}
    accs.update({f"env{e}_out_acc": 0.01 for e in others})
    return {**accs, f"env{train}_out_acc": iid, f"env{train}_in_acc": 0.02}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("single")
    paint_test = [0, 1, 3, 4, 5]
    decoy = trained_on(2, 0.3, [0.99] * 5)
    for model, row in TABLE3.items():
        best = trained_on(2, row[2] / 100, [row[e] / 100 for e in paint_test])
        # the best checkpoint by painting's held-out accuracy is the middle one; hparams 1 is worse
        write_run(root, model, paint_test, 0, 0, [decoy, best, {**decoy, "env2_out_acc": 0.2}])
        write_run(root, model, paint_test, 1, 0, [{**decoy, "env2_out_acc": 0.5}])
    # trained on clipart: ViT over two trial seeds, GMoE over one; no ResNet50 baseline here
    clip_test = [1, 2, 3, 4, 5]
    write_run(root, "vit_small_patch16_224", clip_test, 0, 0, [trained_on(0, 0.7, [0.1, 0.2, 0.3, 0.4, 0.5])])
    write_run(root, "vit_small_patch16_224", clip_test, 0, 1, [trained_on(0, 0.8, [0.2, 0.3, 0.4, 0.5, 0.6])])
    write_run(root, "gmoe_small_patch16_224", clip_test, 0, 0, [trained_on(0, 0.9, [0.5] * 5)])
    # an ordinary multi-source run is not single-source
    write_run(root, "resnet50", [0], 0, 0, [trained_on(0, 0.99, [0.99] * 5)])
    return load_records(root)


def test_improvement_reproduces_gmoe_table3():
    r50 = TABLE3["resnet50"]
    ood = [0, 1, 3, 4, 5]
    for model, iid_imp, ood_imp in [("resnet101", 1.1, 12.4), ("gmoe_small_patch16_224", 10.5, 42.3),
                                    ("vit_small_patch16_224", 10.0, 38.2)]:
        row = TABLE3[model]
        assert round(improvement(row[2], r50[2]), 1) == iid_imp
        assert round(ood_improvement([row[e] for e in ood], [r50[e] for e in ood]), 1) == ood_imp
    assert improvement(63.4, 62.7, "absolute") == pytest.approx(0.7)
    assert improvement(1.0, 0.0) is None


def test_selected_checkpoint_and_splits(records):
    accs = single_source_accs(records)
    gmoe = accs[(accs["model"] == "gmoe_small_patch16_224") & (accs["train_env"] == 2)]
    assert set(gmoe["step"]) == {100} and set(gmoe["hparams_seed"]) == {0}
    assert gmoe.set_index("env")["acc"].round(3).tolist() == [0.435, 0.161, 0.693, 0.053, 0.564, 0.38]
    out = single_source_accs(records, ood_split="out")
    assert set(out.loc[(out["train_env"] == 2) & (out["env"] != 2), "acc"]) == {0.01}
    assert set(accs["train_env"]) == {0, 2}  # the [0] run (trained on five domains) is not included


def test_table_cells(records):
    text = single_source_table(records, baseline="resnet50")
    assert "| ERM / resnet101              | 40.5 +/- 0.0 | 13.1 +/- 0.0 |     63.4 +/- 0.0 |" in text
    assert "1.1%" in text and "12.4%" in text and "10.5%" in text and "42.3%" in text
    # trained on clipart: ViT mean +/- SE over two seeds, improvements missing without a ResNet50 run
    assert "| ERM / vit_small_patch16_224  |    75.0 +/- 3.5 | 15.0 +/- 3.5 |" in text
    assert "|      35.0 |          X |          X |" in text
    absolute = single_source_table(records, baseline="ERM / resnet50", improvement_kind="absolute")
    assert "|       +0.7 |       +1.7 |" in absolute  # ResNet101: 63.4 - 62.7; mean(3.4, .2, .9, 1.9, 2.1)


def test_baseline_errors(records):
    with pytest.raises(ValueError, match="ambiguous"):
        single_source_table(records, baseline="ERM")
    with pytest.raises(ValueError, match="matches no single-source run"):
        single_source_table(records, baseline="resnet18")


@pytest.mark.parametrize("latex", [False, True])
def test_golden(records, latex):
    text = single_source_table(records, baseline="resnet50", latex=latex)
    path = GOLDEN / ("single_source.tex" if latex else "single_source.md")
    if os.environ.get("DGMOE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path}; rerun with DGMOE_UPDATE_GOLDEN=1 and review"


def test_cli_single_source(records, cli):
    root = Path(records["run_dir"].iloc[0]).parent
    result = cli("results", root, "--single-source", "--baseline", "resnet50")
    assert result.exit_code == 0, result.output
    assert "42.3%" in (root / "results_single_source.md").read_text()
    result = cli("results", root, "--single-source", "--baseline", "ERM")
    assert result.exit_code == 2 and "ambiguous" in result.output
