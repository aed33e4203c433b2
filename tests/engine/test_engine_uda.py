"""DomainBed's --uda_holdout_fraction: test domains lose part of their 'in' split to an unlabeled 'uda' split,
recorded as env{k}_uda_acc (k counting uda splits, as DomainBed names them) and never trained on."""
import json

from dgmoe.engine import train


def test_uda_split_is_recorded_under_domainbeds_names(tmp_path):
    out = tmp_path / "run"
    result = train(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=40,
                   steps=2, checkpoint_freq=1, test_envs=(1, 3), uda_holdout_fraction=0.25, num_threads=1,
                   progress="none", output_dir=str(out))
    record = result.records[-1]
    assert {k for k in record if "_uda_" in k} == {"env0_uda_acc", "env0_uda_loss", "env1_uda_acc", "env1_uda_loss"}
    splits = json.loads((out / "config.json").read_text())["splits"]
    assert splits["uda"] == {"1": 8, "3": 8} and splits["in"] == [32, 24, 32, 24, 32, 32]
    assert record["args"]["uda_holdout_fraction"] == 0.25


def test_results_tables_read_runs_with_a_uda_split(tmp_path, cli):
    train(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=40, steps=2,
          checkpoint_freq=1, test_envs=(2,), uda_holdout_fraction=0.5, num_threads=1, progress="none",
          output_dir=str(tmp_path / "run"))
    tables = cli("results", tmp_path, "--no-save")
    assert tables.exit_code == 0 and "RotatedMNIST" in tables.output, tables.output


def test_no_uda_split_by_default(tmp_path):
    result = train(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=40,
                   steps=1, checkpoint_freq=1, num_threads=1, progress="none", output_dir=str(tmp_path / "run"))
    assert not any("_uda_" in k for k in result.records[-1])
