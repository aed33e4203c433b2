"""`dgmoe quickstart --seeds`: both models once per seed, in folders of their own, and each accuracy as mean ± sd
over the seeds with GMoE's out-of-domain lead seed by seed (training stubbed: only the bookkeeping is under test)."""
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_checks import refused

from dgmoe.experiments import quickstart as qs

OOD = {("vit_micro_patch7_28", 0): 0.50, ("vit_micro_patch7_28", 1): 0.60, ("vit_micro_patch7_28", 2): 0.55,
       ("gmoe_micro_patch7_28", 0): 0.52, ("gmoe_micro_patch7_28", 1): 0.59, ("gmoe_micro_patch7_28", 2): 0.60}


@pytest.fixture
def trained(monkeypatch):
    """`train` stubbed: each run's out-of-domain accuracy is OOD's for its model and seed; returns the configs."""
    configs = []

    def fake_train(cfg):
        configs.append(cfg)
        ood = OOD[(cfg.model.name, cfg.seeds.seed)]
        records = [{"step": 299, "args": {"domains": ["0", "15"]}, "env0_in_acc": ood, "env1_out_acc": 0.8,
                    "step_time": 0.1, "eval_time": 1.0}]
        return SimpleNamespace(records=records)

    monkeypatch.setattr(qs, "train", fake_train)
    return configs


def test_each_seed_trains_both_models_into_its_own_folder(trained, tmp_path):
    said = []
    rows = qs.quickstart_seeds(tmp_path, (0, 2), say=said.append, steps=300)
    assert [(c.model.name, c.seeds.seed, Path(c.execution.output_dir)) for c in trained] == [
        (m, s, tmp_path / f"seed{s}" / m) for s in (0, 2) for m in qs.QUICKSTART_MODELS]
    assert [(r["seed"], r["model"]) for r in rows] == [(s, m) for s in (0, 2) for m in qs.QUICKSTART_MODELS]
    assert said[0] == f"seed 0 (1 of 2): {tmp_path / 'seed0'}" and said[3].startswith("seed 2 (2 of 2)")
    assert rows[0]["train time (s)"] == pytest.approx(300 * 0.1 + 1.0)


def test_spread_is_mean_and_sample_sd_and_the_lead_is_paired_by_seed(trained, tmp_path):
    vit, gmoe = qs.spread(qs.quickstart_seeds(tmp_path, (0, 1, 2), say=lambda line: None))
    assert vit["seeds"] == [0, 1, 2] and vit["out-of-domain acc"] == pytest.approx(0.55)
    assert vit["out-of-domain acc sd"] == pytest.approx(0.05)  # (-0.05, 0.05, 0): n - 1 in the denominator
    assert gmoe["ood leads"] == pytest.approx([0.02, -0.01, 0.05])
    assert gmoe["ood lead"] == pytest.approx(0.02) and gmoe["ood lead sd"] == pytest.approx(0.03)
    assert vit["ood lead"] == 0


def test_the_command_prints_every_seed_and_the_spread(cli, trained, tmp_path, monkeypatch):
    import dgmoe.engine.trainer as trainer

    monkeypatch.setattr(trainer, "main_log_config", lambda *a, **k: None)
    result = cli("quickstart", "--seeds", "0,1,2", "--output-dir", tmp_path)
    assert result.exit_code == 0, result.output
    spread = [line for line in result.output.split("Over seeds 0, 1, 2")[1].splitlines() if line.startswith("| ")]
    assert [[c.strip() for c in line.split("|")[2:4]] for line in spread[1:]] == [["80.0 ± 0.0", "55.0 ± 5.0"],
                                                                                   ["80.0 ± 0.0", "57.0 ± 4.4"]]
    assert "gmoe_micro_patch7_28 - vit_micro_patch7_28, out of domain: +2.0 ± 3.0 points (seed by seed: " \
           "+2.0, -1.0, +5.0)" in result.output
    assert f"Run folders: {tmp_path}/seed<S>/<model>" in result.output


def test_seed_and_seeds_together_are_refused_before_anything_is_written(cli, tmp_path):
    refused(cli, "quickstart", "--seed", "3", "--seeds", "0,1", "--output-dir", tmp_path / "q",
            says=("--seed and --seeds",))
    refused(cli, "quickstart", "--seeds", "0,0", "--output-dir", tmp_path / "q", says=("--seeds 0,0 repeats",))
    assert not (tmp_path / "q").exists()
