"""dgmoe's WILDS leaderboard output against WILDS' own evaluator (`examples/evaluate.py`, recorded by
`record_wilds_evaluate.py` into `fixtures/wilds_evaluate.json`): the dataset and split names and file-name
prefixes it looks for, the splits it reads, and its arithmetic. On the same tiny FMoW and Camelyon17 files and the
same predictions, the metrics dgmoe's export writes per seed (`dgmoe.report.leaderboard`) equal WILDS'
`evaluate_replicate`, and dgmoe's mean and std over seeds equal what `evaluate_benchmark` aggregates."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from wilds_fixtures import write_camelyon, write_fmow

from dgmoe.data.catalogue import get_dataset, get_spec
from dgmoe.posthoc.leaderboard import _metrics
from dgmoe.report.leaderboard import aggregate, pred_file_name

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "wilds_evaluate.json").read_text())
DGMOE = {"fmow": "FMoW", "camelyon17": "Camelyon17", "iwildcam": "iWildCam"}


def prediction(i: int, y: int, seed: int, n_classes: int) -> int:
    """The recorder's rule (`record_wilds_evaluate.prediction`)."""
    return y if (i + seed) % 3 else (y + 1) % n_classes


def test_the_catalogue_declares_wilds_names_and_the_splits_its_evaluator_reads():
    assert FIXTURE["wilds_version"] == "2.0.0" and len(FIXTURE["wilds_commit"]) == 40
    for name, dataset in DGMOE.items():
        evaluation = get_spec(dataset).evaluation
        recorded = FIXTURE["datasets"][name]
        assert evaluation.wilds_name == name
        assert sorted(evaluation.wilds_eval_splits) == sorted(recorded["splits"])
        assert len(recorded["replicates"]) == evaluation.trial_seeds  # WILDS' replicates: 3, Camelyon17 10
        for split, prefixes in recorded["file_prefixes"].items():
            for r, prefix in enumerate(prefixes):
                name_written = pred_file_name(name, split, r)
                assert name_written.startswith(prefix) and name_written.endswith(".csv")


@pytest.mark.parametrize("name", ["fmow", "camelyon17"])
def test_dgmoe_metrics_of_the_same_predictions_are_wilds_evaluators(name, tmp_path):
    recorded = FIXTURE["datasets"][name]
    (write_fmow if name == "fmow" else write_camelyon)(tmp_path)
    dataset = DGMOE[name]
    data = get_dataset(dataset, tmp_path, 8)
    evaluation = get_spec(dataset).evaluation
    by_split = {evaluation.wilds_split(d): i for i, d in enumerate(data.domains)}
    seeds = {}
    for split in recorded["splits"]:
        if split not in by_split:  # Camelyon17's id_val: dgmoe's hospital domains do not hold it apart
            assert name == "camelyon17" and split == "id_val"
            continue
        env = data.environments[by_split[split]]
        y = env.labels.numpy()
        groups = env.meta[evaluation.field].numpy()
        assert len(y) == recorded["split_sizes"][split]
        for r, replicate in enumerate(recorded["replicates"]):
            pred = np.array([prediction(i, int(t), r, recorded["n_classes"]) for i, t in enumerate(y)])
            mine = _metrics(dataset, y, pred, groups)
            want = recorded["replicate_metrics"][split][replicate]
            assert {m: mine[m] for m in recorded["metrics"]} == pytest.approx(want, abs=1e-6), (split, replicate)
            seeds.setdefault(str(r), {"splits": {}})["splits"][split] = {"metrics": mine}
    over_seeds = aggregate(seeds)
    for split, stats in over_seeds.items():
        for metric in recorded["metrics"]:
            assert stats[metric]["mean"] == pytest.approx(recorded["aggregate"][split][metric], abs=1e-6)
            assert stats[metric]["std"] == pytest.approx(recorded["aggregate"][split][f"{metric}_std"], abs=1e-6)


def test_a_summary_names_what_wilds_evaluator_would_miss():
    from dgmoe.report.leaderboard import not_written

    camelyon = get_spec("Camelyon17").evaluation
    seeds = {"0": {"splits": {camelyon.wilds_split(d): {} for d in ("hospital_1", "hospital_2")}}}
    summary = {"dataset": "Camelyon17", "wilds_name": "camelyon17", "seeds": seeds,
               "evaluator_reads": list(camelyon.wilds_eval_splits)}
    (line,) = not_written(summary)
    assert "reads split id_val, which these runs did not hold out" in line
    lao = {**summary, "dataset": "FMoW-LAO", "wilds_name": get_spec("FMoW-LAO").evaluation.wilds_name}
    assert "not a WILDS benchmark" in not_written(lao)[0]
