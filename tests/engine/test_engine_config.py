"""The typed run description: one declaration per setting, the CLI generated from it, config files round-trip."""
import dataclasses
import json
import typing

import pytest

from dgmoe.cli.options import config_from_options, run_fields
from dgmoe.cli.train import command as train_command
from dgmoe.engine.config import ExecutionConfig, RunConfig, identity_differences
from dgmoe.settings import ConfigError, flag, key_of, kind_of

# a value unlike the default for every kind of setting, so the test covers fields added later
_SAMPLE = {"str": "x7", "int": 7, "float": 0.25, "bool": None, "tuple": (1, 2), "dict": {"depth": 3}}


def _other_value(f: dataclasses.Field, hint) -> object:
    base, _ = kind_of(hint)
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if f.metadata.get("choices"):
        return next(c for c in f.metadata["choices"] if c != default)
    if base is bool:
        return not default
    return _SAMPLE[base.__name__]


def _argv(key: str, value: object) -> list[str]:
    if isinstance(value, bool):
        return [flag(key) if value else "--no-" + flag(key)[2:]]
    if isinstance(value, tuple):
        return [t for v in value for t in (flag(key), str(v))]
    if isinstance(value, dict):
        return [flag(key), json.dumps(value)]
    return [flag(key), str(value)]


@pytest.mark.parametrize("section, f, hint", run_fields(), ids=lambda v: getattr(v, "name", str(v)))
def test_every_config_field_is_settable_from_the_cli(section, f, hint):
    value = _other_value(f, hint)
    switch = ExecutionConfig.NEEDS.get(f.name) if section == "execution" else None  # (with the switch it needs)
    ctx = train_command.make_context("train", _argv(key_of(f), value) + ([flag(switch)] if switch else []))
    cfg = config_from_options(ctx, ctx.params)
    assert getattr(getattr(cfg, section), f.name) == value
    default = RunConfig().replace(**{switch: True}) if switch else RunConfig()
    assert cfg != default and cfg.replace(**{key_of(f): getattr(getattr(default, section), f.name)}) == default


def test_every_field_has_help_and_a_flag_in_train_help(cli):
    out = cli("train", "--help").output
    for _, f, _ in run_fields():
        assert f.metadata["help"], f.name
        assert flag(key_of(f)) in out, f.name


def test_config_file_round_trips_and_flags_override_it(tmp_path):
    cfg = RunConfig.from_flat(dataset="PACS", test_envs=(1, 3), model="gmoe_micro_patch7_28", hparams={"lr": 1e-4},
                              model_kwargs={"depth": 2}, steps=9, output_dir=str(tmp_path / "a"), precision="bf16")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"config": cfg.to_dict(), "hparams": {}}))  # a run's config.json
    assert RunConfig.from_file(path) == cfg
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(cfg.to_dict()))
    assert RunConfig.from_file(bare) == cfg
    ctx = train_command.make_context("train", ["--config", str(path), "--steps", "11"])
    again = config_from_options(ctx, ctx.params, RunConfig.from_file(path))
    assert again == cfg.replace(steps=11)
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert RunConfig.from_flat(cfg.flat()) == cfg


def test_print_config_is_loadable(tmp_path, cli):
    result = cli("train", "--dataset", "PACS", "--test-envs", "2", "--steps", "5", "--print-config")
    assert result.exit_code == 0, result.output
    path = tmp_path / "c.json"
    path.write_text(result.output)
    assert RunConfig.from_file(path) == RunConfig.from_flat(dataset="PACS", test_envs=(2,), steps=5)


def test_flat_config_json_of_older_runs_is_migrated():
    old = {"dataset": "PACS", "test_envs": [0], "model": "vit_tiny_patch16_224", "algorithm": "ERM",
           "hparams": '{"lr": 0.001}', "model_kwargs": "", "steps": 5, "output_dir": "runs/x", "device": "cpu",
           "retired_option": 1}
    with pytest.raises(ConfigError, match="--retired-option"):
        RunConfig.from_dict(old)
    with pytest.warns(UserWarning, match="ignored: retired_option"):
        cfg = RunConfig.from_dict(old, strict=False)
    assert cfg.algorithm.hparams == {"lr": 0.001} and cfg.model.kwargs == {} and cfg.training.steps == 5


def test_identity_excludes_execution_by_construction():
    cfg = RunConfig.from_flat(dataset="PACS", steps=5)
    for f in dataclasses.fields(ExecutionConfig):
        switch = {ExecutionConfig.NEEDS[f.name]: True} if f.name in ExecutionConfig.NEEDS else {}
        changed = cfg.replace(**{key_of(f): _other_value(f, typing.get_type_hints(ExecutionConfig)[f.name])}, **switch)
        assert changed.identity_hash() == cfg.identity_hash() and identity_differences(cfg, changed) == []
    assert identity_differences(cfg, cfg.replace(steps=6)) == ["steps"]
    assert cfg.replace(seed=1).identity_hash() != cfg.identity_hash()


@pytest.mark.parametrize("settings, message", [
    ({"stepz": 3}, "unknown run setting --stepz; did you mean --steps?"),
    ({"steps": -1}, "--steps must be >= 0"),
    ({"holdout_fraction": 1.0}, "--holdout-fraction must be < 1"),
    ({"test_envs": (1, 1)}, "--test-envs names a domain twice"),
    ({"hparams": "{lr: 1}"}, "--hparams is not valid JSON"),
    ({"precision": "fp16"}, "--precision must be one of fp32, tf32, bf16"),
    ({"num_workers": 2.5}, "--num-workers must be an integer"),
])
def test_bad_settings_name_their_flag(settings, message):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?").replace("{", r"\{")):
        RunConfig.from_flat(settings)


def test_to_argv_parses_back_to_the_same_config():
    cfg = RunConfig.from_flat(dataset="PACS", test_envs=(0, 2), model_kwargs={"depth": 2}, save_best=False,
                              steps=3, label="my run", log_every_s=5.0)
    ctx = train_command.make_context("train", cfg.to_argv())
    assert config_from_options(ctx, ctx.params) == cfg
