"""Experiment trackers: W&B (offline) and MLflow (a local file store) receive every numeric field of every record at
its step, the config as parameters and the run folder and identity as tags; read back from what each wrote. A run
killed at any of its writes and re-run continues its one tracker run, every step logged once."""
from __future__ import annotations

import builtins
import json

import pytest
from run_records import comparable_records

from dgmoe.cli import run as cli
from dgmoe.engine.rundir import RunWriter
from dgmoe.engine.trainer import train

wandb = pytest.importorskip("wandb", reason="the wandb extra is not installed: pip install 'dgmoe[wandb]'")
mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install 'dgmoe[mlflow]'")
from wandb_offline import read_offline_runs  # noqa: E402 -- (needs wandb)

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            checkpoint_freq=2, num_threads=1, progress="none", seed=3, steps=6)
KILL_AT = (1, 5, 9, 13, 16)  # the k-th of the run's 17 writes (config, records, weights, resume state ...)


class Killed(BaseException):
    """Stands for SIGKILL: nothing in the engine handles it."""


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    for name in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_NAME", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb_home"))


def _train(out, store, **more):
    return train(output_dir=str(out), wandb=True, mlflow=True, mlflow_uri=str(store), **TINY, **more)


def _mlflow_runs(store):
    client = mlflow.tracking.MlflowClient(tracking_uri=store.resolve().as_uri())
    experiment = client.get_experiment_by_name("dgmoe")
    return client, client.search_runs([experiment.experiment_id])


def _numbers(record):
    return {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_every_record_config_and_tag_reaches_both_trackers(tmp_path):
    out, store = tmp_path / "run", tmp_path / "mlruns"
    _train(out, store)
    records = _records(out)
    steps = [r["step"] for r in records]
    assert len(steps) >= 3
    client, runs = _mlflow_runs(store)
    assert len(runs) == 1
    logged = runs[0]
    assert logged.data.params["dataset"] == "RotatedMNIST" and logged.data.params["steps"] == "6"
    assert logged.data.tags["dgmoe.run_dir"] == str(out.resolve()) and len(logged.data.tags["dgmoe.identity"]) == 32
    assert logged.info.status == "FINISHED"
    for key, value in _numbers(records[-1]).items():
        history = client.get_metric_history(logged.info.run_id, key)
        assert [m.step for m in history] == steps, key
        assert history[-1].value == pytest.approx(value), key
    (segment,) = read_offline_runs(out)
    assert segment.config["dataset"] == "RotatedMNIST" and segment.config["dgmoe_run_dir"] == str(out.resolve())
    assert segment.tags == [f"identity:{logged.data.tags['dgmoe.identity']}"]
    assert [row["_step"] for row in segment.history] == steps
    assert segment.history[-1]["env0_in_acc"] == pytest.approx(records[-1]["env0_in_acc"])
    assert json.loads((out / "trackers.json").read_text())["mlflow"]["last_step"] == steps[-1]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        mp.setenv("WANDB_CONFIG_DIR", str(root / "home"))
        _train(root / "run", root / "mlruns")
    return root / "run"


@pytest.mark.parametrize("kill_at", KILL_AT)
def test_a_killed_and_resumed_run_is_one_tracker_run_with_every_step_once(tmp_path, kill_at, uninterrupted):
    out, store = tmp_path / "run", tmp_path / "mlruns"
    original, count = RunWriter._write, []

    def killing(self, write):
        count.append(1)
        if len(count) == kill_at:
            raise Killed
        original(self, write)

    RunWriter._write = killing
    try:
        with pytest.raises(Killed):
            _train(out, store)
    finally:
        RunWriter._write = original
    _train(out, store)  # the same command resumes
    records = _records(out)
    def comparable(folder):  # (the store's path differs between the two runs)
        return [{**r, "args": {**r["args"], "mlflow_uri": None}} for r in comparable_records(folder)]

    assert comparable(out) == comparable(uninterrupted)
    client, runs = _mlflow_runs(store)
    assert len(runs) == 1
    history = client.get_metric_history(runs[0].info.run_id, "env0_in_acc")
    assert [m.step for m in history] == [r["step"] for r in records]
    assert [m.value for m in history] == pytest.approx([r["env0_in_acc"] for r in records])
    segments = read_offline_runs(out)
    assert {s.run_id for s in segments} == {json.loads((out / "trackers.json").read_text())["wandb"]["id"]}
    steps = [row["_step"] for s in segments for row in s.history]
    assert steps == [r["step"] for r in records]


def test_a_missing_tracker_package_is_one_line_naming_the_extra_before_anything_is_written(tmp_path, monkeypatch,
                                                                                            capsys):
    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb" or name.startswith("wandb."):
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    monkeypatch.delitem(__import__("sys").modules, "wandb", raising=False)
    out = tmp_path / "run"
    code = cli(["train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28", "--steps", "1",
                "--n-per-domain", "20", "--progress", "none", "--wandb", "--output-dir", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pip install 'dgmoe[wandb]'" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("flag, switch", [("--wandb-project", "--wandb"), ("--mlflow-uri", "--mlflow")])
def test_a_tracker_setting_without_its_tracker_is_refused(tmp_path, capsys, flag, switch):
    out = tmp_path / "run"
    code = cli(["train", "--dataset", "RotatedMNIST", "--steps", "1", flag, "x", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"add {switch}" in err and not out.exists()


def test_a_resumed_run_started_elsewhere_logs_to_the_store_it_began_with(tmp_path, monkeypatch):
    """The default store is ./mlruns of where the run started; extended from another folder, it continues there."""
    first, second, out = tmp_path / "a", tmp_path / "b", tmp_path / "run"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    train(output_dir=str(out), mlflow=True, keep_resume=True, **{**TINY, "steps": 4})
    monkeypatch.chdir(second)
    train(output_dir=str(out), mlflow=True, extend=True, **TINY)
    assert not (second / "mlruns").exists()
    client, runs = _mlflow_runs(first / "mlruns")
    assert len(runs) == 1
    history = client.get_metric_history(runs[0].info.run_id, "env0_in_acc")
    assert [m.step for m in history] == [r["step"] for r in _records(out)]
