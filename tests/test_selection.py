"""Model selection maths (DomainBed's), on records written here with hand-computed answers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dgmoe.report.collect import load_records
from dgmoe.report.tables import mean_cell
from dgmoe.selection import (
    IIDAccuracySelection,
    LeaveOneOutSelection,
    OracleSelection,
    WorstGroupSelection,
    get_selection,
    mean_and_se,
    python_argmax,
    resolve_selections,
    sweep_accs,
)

N_ENVS = 3
NAN = float("nan")


def write_run(root: Path, test_envs, hparams_seed, trial_seed, checkpoints, algorithm="ERM", model="vit"):
    """One finished run dir; `checkpoints` is a list of (step, {key: value}); unnamed env accs are 0."""
    run = root / f"{algorithm}_{model}_{'-'.join(map(str, test_envs))}_h{hparams_seed}_t{trial_seed}"
    run.mkdir(parents=True)
    args = dict(dataset="Toy", algorithm=algorithm, model=model, test_envs=list(test_envs),
                hparams_seed=hparams_seed, trial_seed=trial_seed, seed=0, output_dir=str(run), steps=100)
    with open(run / "results.jsonl", "w") as f:
        for step, accs in checkpoints:
            rec = {"step": step, "loss": 0.5}
            for i in range(N_ENVS):
                rec[f"env{i}_in_acc"] = accs.get(f"env{i}_in_acc", 0.0)
                rec[f"env{i}_out_acc"] = accs.get(f"env{i}_out_acc", 0.0)
            rec.update({k: v for k, v in accs.items() if k not in rec})  # other keys (WILDS metrics) as given
            f.write(json.dumps({**rec, "hparams": {"lr": 1e-3}, "args": args}) + "\n")
    (run / "done").write_text("done")


def selected(records: pd.DataFrame, method, test_env=0, trial_seed=0) -> dict:
    sweep = sweep_accs(records, method)
    row = sweep[(sweep["test_env"] == test_env) & (sweep["trial_seed"] == trial_seed)]
    assert len(row) == 1, sweep
    return row.iloc[0].to_dict()


def test_domainbed_standard_error_vector():
    # DomainBed's pinned case: population std (ddof=0) / sqrt(n), in percent.
    assert mean_cell([0.1, 0.2, 0.3]).render() == "20.0 +/- 4.7"
    assert mean_cell([0.1, 0.2, 0.3]).render(latex=True) == "20.0 $\\pm$ 4.7"
    mean, se = mean_and_se([0.6, 0.7])
    assert mean == pytest.approx(65.0) and se == pytest.approx(5.0 / 2**0.5)
    assert mean_cell([]).render() == "X" and mean_cell([]).mean is None
    assert mean_cell([0.42]).render() == "42.0 +/- 0.0"


@pytest.fixture
def iid_records(tmp_path):
    # test env 0; validation = mean of env1_out, env2_out (env0_out is the test domain's and must be ignored)
    write_run(tmp_path, [0], 0, 0, [
        (0, {"env1_out_acc": 0.5, "env2_out_acc": 0.7, "env0_out_acc": 0.99, "env0_in_acc": 0.30}),  # val .6
        (50, {"env1_out_acc": 0.9, "env2_out_acc": 0.7, "env0_in_acc": 0.40}),  # val .8 <- first max
        (100, {"env1_out_acc": 0.8, "env2_out_acc": 0.8, "env0_out_acc": 0.2, "env0_in_acc": 0.90}),  # val .8
    ])
    write_run(tmp_path, [0], 1, 0, [
        (0, {"env1_out_acc": 0.7, "env2_out_acc": 0.7, "env0_in_acc": 0.80}),  # val .7
        (100, {"env1_out_acc": 0.6, "env2_out_acc": 0.6, "env0_out_acc": 0.5, "env0_in_acc": 0.85}),
    ])
    write_run(tmp_path, [0], 2, 0, [  # ties hparams 0 at val .8: the larger hparams_seed wins (DomainBed)
        (100, {"env1_out_acc": 0.6, "env2_out_acc": 1.0, "env0_out_acc": 0.3, "env0_in_acc": 0.10}),
    ])
    return load_records(tmp_path)


def test_iid_picks_best_training_domain_validation_checkpoint(iid_records):
    run = iid_records[iid_records["hparams_seed"] == 0]
    acc = IIDAccuracySelection.run_acc(run, test_env=0)
    assert (acc.val_acc, acc.test_acc, acc.step) == (pytest.approx(0.8), 0.40, 50)
    ranked = IIDAccuracySelection.hparams_accs(iid_records, test_env=0)
    assert ranked["hparams_seed"].tolist() == [2, 0, 1]
    row = selected(iid_records, "iid")
    assert (row["hparams_seed"], row["step"], row["test_acc"]) == (2, 100, 0.10)


def test_oracle_uses_last_checkpoint_and_argmax_over_hparams(iid_records):
    # last checkpoints: h0 (out .2, in .90), h1 (out .5, in .85), h2 (out .3, in .10) -> h1
    acc = OracleSelection.run_acc(iid_records[iid_records["hparams_seed"] == 0], test_env=0)
    assert (acc.val_acc, acc.test_acc, acc.step) == (0.2, 0.90, 100)
    row = selected(iid_records, OracleSelection)
    assert (row["hparams_seed"], row["step"], row["val_acc"], row["test_acc"]) == (1, 100, 0.5, 0.85)


def test_python_argmax_is_pythons_max():
    assert python_argmax([]) is None
    cases = [[0.5, 0.7, 0.7, 0.1], [NAN, 0.9, 0.1], [0.2, NAN, 0.9], [NAN, NAN]]
    for values in cases:  # DomainBed's Q.argmax is max(): first maximum; a leading NaN is never replaced
        assert values[python_argmax(values)] is max(values)
    assert [python_argmax(v) for v in cases] == [1, 0, 2, 0]


def test_domainbed_tie_and_nan_rules(tmp_path):
    both = {"env1_out_acc": 0.8, "env2_out_acc": 0.8}
    # seeds 2 and 10 tie at val .8 (and "10" < "2" as strings): seeds sort as ints, the last of a tie wins
    write_run(tmp_path, [0], 2, 0, [(0, {**both, "env0_in_acc": 0.2, "env0_out_acc": 0.7})])
    write_run(tmp_path, [0], 10, 0, [(0, {**both, "env0_in_acc": 0.3, "env0_out_acc": 0.7}),
                                      (100, {"env0_in_acc": 0.4, "env0_out_acc": 0.7})])
    # seed 11's first checkpoint has a NaN val: max() keeps it, and the run ranks as -inf despite step 20
    write_run(tmp_path, [0], 11, 0, [(0, {"env1_out_acc": NAN, "env0_in_acc": 0.9, "env0_out_acc": NAN}),
                                      (20, {"env1_out_acc": 1.0, "env2_out_acc": 1.0, "env0_in_acc": 0.95})])
    records = load_records(tmp_path)
    acc = IIDAccuracySelection.run_acc(records[records["hparams_seed"] == 11], test_env=0)
    assert acc.step == 0 and np.isnan(acc.val_acc) and acc.test_acc == 0.9
    assert IIDAccuracySelection.hparams_accs(records, 0)["hparams_seed"].tolist() == [10, 2, 11]
    assert (selected(records, "iid")["hparams_seed"], selected(records, "iid")["test_acc"]) == (10, 0.3)
    # oracle: last checkpoints' test-domain out accs .7, .7 and 0 (step 20 of seed 11) -> seed 10, step 100
    assert (selected(records, "oracle")["hparams_seed"], selected(records, "oracle")["step"]) == (10, 100)


def test_every_val_nan_takes_the_largest_hparams_seed(tmp_path):
    for hseed in (3, 12):
        accs = {"env0_out_acc": NAN, "env1_out_acc": NAN, "env0_in_acc": hseed / 100}
        write_run(tmp_path, [0], hseed, 0, [(0, accs)])
    records = load_records(tmp_path)
    for method in ("iid", "oracle"):
        assert selected(records, method)["test_acc"] == 0.12


def test_leave_one_out_step_tie_takes_the_first_step_numerically(tmp_path):
    # steps 20 and 100 tie ("100" < "20" as strings): the earlier step in numeric order wins
    write_run(tmp_path, [0], 0, 0, [(20, {"env0_in_acc": 0.2}), (100, {"env0_in_acc": 0.3})])
    write_run(tmp_path, [0, 1], 0, 0, [(s, {"env1_in_acc": 0.5}) for s in (20, 100)])
    write_run(tmp_path, [0, 2], 0, 0, [(s, {"env2_in_acc": 0.7}) for s in (20, 100)])
    row = selected(load_records(tmp_path), "loo")
    assert (row["step"], row["test_acc"], row["val_acc"]) == (20, 0.2, pytest.approx(0.6))


def _loo_runs(root: Path, with_pair_02: bool = True) -> pd.DataFrame:
    write_run(root, [0], 0, 0, [(0, {"env0_in_acc": 0.1}), (10, {"env0_in_acc": 0.2})])
    # pair runs give the validation domain's *in* accuracy; env0 accs there are decoys
    write_run(root, [0, 1], 0, 0, [(0, {"env1_in_acc": 0.5, "env0_in_acc": 0.9}),
                                   (10, {"env1_in_acc": 0.4, "env0_in_acc": 0.9})])
    if with_pair_02:
        write_run(root, [0, 2], 0, 0, [(0, {"env2_in_acc": 0.6, "env1_in_acc": 0.99}),
                                       (10, {"env2_in_acc": 0.5})])
    return load_records(root)


def test_leave_one_out_with_all_pairs(tmp_path):
    # step 0: (0.5 + 0.6) / (3 - 1) = 0.55; step 10: 0.45 -> step 0, test = env0_in_acc of the single run = 0.1
    records = _loo_runs(tmp_path)
    row = selected(records, LeaveOneOutSelection)
    assert row["val_acc"] == pytest.approx(0.55)
    assert (row["step"], row["test_acc"]) == (0, 0.1)
    # test env 1 and 2 have no pairs {1, 2}: not scorable
    assert set(sweep_accs(records, "loo")["test_env"]) == {0}


def test_leave_one_out_missing_pair_gives_no_cell(tmp_path):
    records = _loo_runs(tmp_path, with_pair_02=False)
    assert LeaveOneOutSelection.run_acc(records, test_env=0) is None
    assert sweep_accs(records, "loo").empty
    # training-domain validation still works on the single run (pairs are not single-test-env records)
    assert selected(records, "iid")["test_acc"] == 0.1


def test_single_test_env_records_only(tmp_path):
    # a pair run alone is not a result for IID or oracle
    write_run(tmp_path, [0, 1], 0, 0, [(0, {"env0_in_acc": 0.9, "env2_out_acc": 0.9})])
    records = load_records(tmp_path)
    assert sweep_accs(records, "iid").empty and sweep_accs(records, "oracle").empty


def test_groups_split_by_model_and_trial(tmp_path):
    for trial, acc in [(0, 0.1), (1, 0.2)]:
        write_run(tmp_path, [2], 0, trial, [(0, {"env2_in_acc": acc})], model="vit")
        write_run(tmp_path, [2], 0, trial, [(0, {"env2_in_acc": acc + 0.5})], model="gmoe")
    sweep = sweep_accs(load_records(tmp_path), "oracle")
    got = {(r.model, r.trial_seed): r.test_acc for r in sweep.itertuples()}
    assert got == {("vit", 0): 0.1, ("vit", 1): 0.2, ("gmoe", 0): 0.6, ("gmoe", 1): 0.7}


def test_duplicate_run_config_is_refused_by_selection_and_dropped_with_a_warning_by_loading(tmp_path):
    import pandas as pd

    from dgmoe.report.collect import DuplicateRunsWarning

    write_run(tmp_path / "a", [0], 0, 0, [(0, {"env0_in_acc": 0.1})])
    write_run(tmp_path / "b", [0], 0, 0, [(0, {"env0_in_acc": 0.2})])
    with pytest.warns(DuplicateRunsWarning, match="1 run configuration appears in several run dirs"):
        records = load_records(tmp_path)
    assert records["run_dir"].nunique() == 1 and records["env0_in_acc"].tolist() == [0.1]  # the first dir kept
    both = pd.concat([load_records(tmp_path / "a"), load_records(tmp_path / "b")], ignore_index=True)
    with pytest.raises(ValueError, match="several run dirs"):  # never two runs' checkpoints mixed
        sweep_accs(both, "iid")


def test_method_lookup():
    assert resolve_selections("all") == [IIDAccuracySelection, LeaveOneOutSelection, OracleSelection]
    assert get_selection("loo") is LeaveOneOutSelection
    with pytest.raises(KeyError, match="Did you mean: oracle"):
        get_selection("orcale")


def _reference_sweep(raw: list[dict], method: str) -> dict[tuple, float]:
    """A plain-loop restatement of DomainBed's selection (grouping, run_acc, hparams argmax)."""
    groups: dict[tuple, dict[int, list[dict]]] = {}
    for r in raw:
        a = r["args"]
        for t in a["test_envs"]:
            key = (a["dataset"], a["algorithm"], a["model"], t, a["trial_seed"])
            groups.setdefault(key, {}).setdefault(a["hparams_seed"], []).append(r)
    out = {}
    for key, runs in groups.items():
        t, best = key[3], None
        for _, recs in sorted(runs.items()):
            singles = sorted((r for r in recs if len(r["args"]["test_envs"]) == 1), key=lambda r: r["step"])
            scored = []  # (val, test)
            if method == "oracle" and singles:
                scored = [(singles[-1][f"env{t}_out_acc"], singles[-1][f"env{t}_in_acc"])]
            elif method == "iid":
                scored = [(sum(r[f"env{j}_out_acc"] for j in range(N_ENVS) if j != t) / (N_ENVS - 1),
                           r[f"env{t}_in_acc"]) for r in singles]
            elif method == "loo":
                for s in singles:
                    vals = {}
                    for r in recs:
                        envs = r["args"]["test_envs"]
                        if len(envs) == 2 and r["step"] == s["step"]:
                            v = envs[0] if envs[1] == t else envs[1]
                            vals[v] = r[f"env{v}_in_acc"]
                    if len(vals) == N_ENVS - 1:
                        scored.append((sum(vals.values()) / (N_ENVS - 1), s[f"env{t}_in_acc"]))
            if scored:
                run_best = max(scored, key=lambda x: x[0])  # first maximum
                if best is None or run_best[0] >= best[0]:  # ties: the later (larger) hparams_seed
                    best = run_best
        if best is not None:
            out[key] = best[1]
    return out


@pytest.mark.parametrize("method", ["iid", "loo", "oracle"])
def test_matches_plain_loop_reference_on_random_sweep(tmp_path, method):
    import random

    rng = random.Random(1234)
    for model in ["vit", "gmoe"]:
        for test_envs in [[0], [1], [2], [0, 1], [0, 2], [1, 2]]:
            for hseed in range(3):
                for trial in range(2):
                    if len(test_envs) == 2 and rng.random() < 0.25:
                        continue  # some leave-one-out pairs are missing
                    ckpts = [(s, {f"env{i}_{sp}_acc": rng.random() for i in range(N_ENVS) for sp in ("in", "out")})
                             for s in (0, 10, 20, 30)]
                    write_run(tmp_path, test_envs, hseed, trial, ckpts, model=model)
    records = load_records(tmp_path)
    raw = list(records["record"])
    expected = _reference_sweep(raw, method)
    sweep = sweep_accs(records, method)
    got = {(r.dataset, r.algorithm, r.model, r.test_env, r.trial_seed): r.test_acc for r in sweep.itertuples()}
    assert got == expected and len(got) >= 6


def test_worst_group_selection_on_wilds_records(tmp_path):
    # a WILDS-style run holding out envs 1 (validation, wilds_val_env) and 2 (test)
    def rec(step, worst, avg, test_avg):
        return (step, {"wilds_val_env": 1, "env1_acc_worst_group": worst, "env1_acc_avg": avg,
                       "env2_acc_avg": test_avg, "env2_acc_worst_group": 0.0, "env0_out_acc": 0.99})

    write_run(tmp_path, [1, 2], 0, 0, [rec(0, 0.2, 0.5, 0.10), rec(1, 0.4, 0.6, 0.20), rec(2, 0.4, 0.7, 0.30),
                                       rec(3, 0.4, 0.7, 0.40), rec(4, NAN, 0.9, 0.50)])
    write_run(tmp_path, [1, 2], 3, 0, [rec(0, 0.4, 0.7, 0.60)])  # ties hp seed 0 at its best: largest seed wins
    write_run(tmp_path, [1, 2], 5, 0, [rec(0, 0.4, 0.65, 0.90)])  # lower tie-break
    records = load_records(tmp_path)
    ranked = WorstGroupSelection.hparams_accs(records[records["hparams_seed"] == 0], test_env=2)
    assert ranked.iloc[0][["step", "val_acc", "test_acc"]].tolist() == [2, 0.4, 0.3]  # tie -> higher avg -> first
    best = selected(records, "worst", test_env=2)
    assert (best["hparams_seed"], best["test_acc"]) == (3, 0.6)
    assert sweep_accs(records, "worst")["test_env"].tolist() == [2]  # the validation split is no test column


def test_worst_group_selection_without_wilds_metrics_uses_the_worst_training_domain(tmp_path):
    write_run(tmp_path, [0], 0, 0, [
        (0, {"env1_out_acc": 0.9, "env2_out_acc": 0.3, "env0_in_acc": 0.1}),   # worst .3
        (1, {"env1_out_acc": 0.5, "env2_out_acc": 0.5, "env0_in_acc": 0.2}),   # worst .5 <- first max
        (2, {"env1_out_acc": 0.6, "env2_out_acc": 0.5, "env0_in_acc": 0.3}),   # worst .5
    ])
    best = selected(load_records(tmp_path), WorstGroupSelection)
    assert (best["step"], best["val_acc"], best["test_acc"]) == (1, 0.5, 0.2)
    assert get_selection("worst") is WorstGroupSelection and resolve_selections("all") == [
        IIDAccuracySelection, LeaveOneOutSelection, OracleSelection]  # `all` stays DomainBed's three
