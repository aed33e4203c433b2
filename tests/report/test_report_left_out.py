"""Tables say what they left out and why: runs that hold out several domains with no single-domain run beside
them, leave-one-domain-out cells without their pair runs, a recipe folder with no run of the recipe; the counts
separate trained runs from soups, and the data line says what the runs used of the folder's version."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dgmoe.report.collect import load_records
from dgmoe.report.results import results_tables

DOMAINS = ["a", "b", "c"]


def _run(root: Path, name: str, test_envs: list[int], extra: dict | None = None) -> None:
    run = root / name
    run.mkdir(parents=True)
    args = {"dataset": "Toy", "algorithm": "ERM", "model": "m", "test_envs": test_envs, "hparams_seed": 0,
            "trial_seed": 0, "seed": 0, "steps": 2, "domains": DOMAINS, **(extra or {})}
    accs = {f"env{i}_{s}_acc": 0.5 for i in range(3) for s in ("in", "out")}
    lines = [json.dumps({"step": step, **accs, "args": args}) for step in (0, 1)]
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    (run / "done").write_text("done")


def test_pair_runs_alone_are_named_not_dropped(tmp_path):
    _run(tmp_path, "pair", [0, 1])
    with pytest.raises(ValueError, match=r"1 run of Toy \(e.g. .*pair\) holds out several domains at once "
                                         r"\(--test-envs 0 1\)"):
        results_tables(load_records(tmp_path))


def test_leave_one_out_cells_say_why_they_are_x(tmp_path):
    _run(tmp_path, "single", [0])
    text = results_tables(load_records(tmp_path), "loo")
    assert "Leave-one-domain-out on Toy: no run holds out a pair of domains" in text
    _run(tmp_path, "pair", [0, 1])
    text = results_tables(load_records(tmp_path), "loo")
    assert "runs hold out 1 of its 3 pairs of domains" in text
    _run(tmp_path, "pair2", [0, 2]), _run(tmp_path, "pair3", [1, 2])
    assert "Leave-one-domain-out on Toy" not in results_tables(load_records(tmp_path), "loo")
    assert "Left out" not in results_tables(load_records(tmp_path), "loo")


def test_counts_separate_soups_and_the_data_line_names_the_subsample(tmp_path):
    _run(tmp_path, "single", [0], {"n_per_domain": 40, "data_version": "official (9 images)"})
    _run(tmp_path, "soup", [0], {"soup": {"member_steps": [1]}, "algorithm": "ERM-soup",
                                 "data_version": "official (9 images)"})
    text = results_tables(load_records(tmp_path), "iid")
    assert "4 records from 1 trained run and 1 soup." in text
    assert "Data: Toy official (9 images), of which the runs used --n-per-domain 40 images per domain (others all " \
           "of it)." in text


def test_a_recipe_folder_without_the_recipes_runs_is_refused(tmp_path, cli):
    _run(tmp_path, "single", [0])
    result = cli("results", tmp_path, "--recipe", "gmoe-table1", "--no-save")
    assert result.exit_code == 2 and "holds no run of recipe gmoe-table1" in result.output, result.output
