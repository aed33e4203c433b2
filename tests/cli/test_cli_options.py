"""Every option of every command is generated from a typed config (`dgmoe.cli.options`): the test walks the
click tree of `dgmoe`, maps every option and argument to the config field it was generated from (or to the
short list of command-line-only parameters below, each with its reason), and checks that `--help` lists
every field a command declares; `--config` files round-trip for sweep and recipe launches as for train."""
import dataclasses
import json

import click
import pytest
from click.testing import CliRunner

from dgmoe.cli import main
from dgmoe.cli.options import SettingArgument, SettingOption, config_fields
from dgmoe.settings import flag_of, key_of

#: parameters that describe no config field, and why
CLI_ONLY = {
    "help": "click's --help",
    "version": "`dgmoe --version`: the installed package's version",
    "debug": "`dgmoe --debug`: show tracebacks (read by `dgmoe.cli.run` anywhere on the command line)",
    "config_file": "--config FILE: the file a config is read from, not a setting of it",
    "print_config": "--print-config: prints the config the command line describes",
    "train_args": "hidden old spelling of the `dgmoe train` flags after `--` (a launch's run settings)",
    "exec_args": "hidden old spelling of the `dgmoe train` flags after `--` (a launch's run settings)",
    "train_flags_": "the `dgmoe train` flags after `--`, parsed by train's own generated options",
    "flags": "the `dgmoe train` execution flags after `--`, parsed by train's own generated options",
}

#: config fields a command declares but sets itself, and why
SET_BY_THE_COMMAND = {
    ("synthetic", "p1"): "the experiment sets it: 1 in the noiseless runs, each --grid value in the noisy ones",
    ("synthetic", "p2"): "the experiment sets it: 1 in the noiseless runs, each --grid value in the noisy ones",
}


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    """Every command and group under `group` (the group itself included), by its path."""
    yield path, group
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


COMMANDS = dict(_commands(main))


def _declared(cmd: click.Command) -> list[tuple[type, dataclasses.Field]]:
    out = []
    for config, only, skip in getattr(cmd.callback, "dgmoe_configs", []):
        out += [(kind, f) for kind, f, _ in config_fields(config, only, skip)]
    return out


def test_the_walk_finds_every_command():
    names = {" ".join(p) for p in COMMANDS}
    assert {"train", "sweep launch", "sweep estimate", "recipe launch", "bench layer", "bench data", "synthetic",
            "geo benchmark", "data prepare", "data check"} <= names
    assert len(names) > 25


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "dgmoe")
def test_every_option_is_generated_from_a_config_field(path):
    cmd = COMMANDS[path]
    declared = {id(f): kind for kind, f in _declared(cmd)}
    for param in cmd.params:
        if param.name in CLI_ONLY:
            continue
        assert isinstance(param, (SettingOption, SettingArgument)), \
            f"{' '.join(path)}: {param.opts} is declared by hand, not generated from a config field"
        assert id(param.setting) in declared and declared[id(param.setting)] is param.config, \
            f"{' '.join(path)}: {param.opts} belongs to no config the command declares"
        assert key_of(param.setting) == param.name and param.setting in dataclasses.fields(param.config)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "dgmoe")
def test_help_lists_every_field_of_the_command(path):
    result = CliRunner().invoke(main, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    fields = _declared(COMMANDS[path])
    for kind, f in fields:
        if f.metadata["hidden"]:  # an old spelling kept for old command lines, by declaration
            continue
        assert flag_of(f) in result.output, f"{' '.join(path)}: {kind.__name__}.{f.name} is not in --help"
    for config, only, skip in getattr(COMMANDS[path].callback, "dgmoe_configs", []):
        for name in skip:
            assert (path[-1], name) in SET_BY_THE_COMMAND, f"{' '.join(path)}: {name} has no flag and no reason"


def test_the_allow_lists_are_used():
    names = {p.name for cmd in COMMANDS.values() for p in cmd.params}
    assert set(CLI_ONLY) - {"help"} <= names


def _printed(cli, *args) -> dict:
    """The config `--print-config` prints (given before the `dgmoe train` flags after `--`)."""
    args = list(args)
    at = args.index("--") if "--" in args else len(args)
    result = cli(*args[:at], "--print-config", *args[at:])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_sweep_config_file_round_trips_to_the_same_jobs(cli, tmp_path):
    from dgmoe.sweep.config import SweepConfig
    from dgmoe.sweep.jobs import build_jobs

    out = tmp_path / "sweep"
    args = ("sweep", "launch", "--datasets", "PACS", "--algorithms", "ERM,CORAL", "--models", "vit_tiny_patch16_224",
            "--output-dir", out, "--n-hparams", "2", "--n-trials", "1", "--steps", "50", "--test-env-sets", "0,1", "2")
    printed = _printed(cli, *args, "--", "--n-per-domain", "8", "--hparams", '{"lr": 1e-4}')
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(printed))
    loaded = SweepConfig.from_file(path)
    assert loaded.algorithms == ("ERM", "CORAL") and loaded.test_env_sets == ((0, 1), (2,))
    assert loaded.base.data.n_per_domain == 8 and loaded.base.algorithm.hparams == {"lr": 1e-4}
    assert loaded == SweepConfig.from_dict(loaded.to_dict())
    assert [j.job_id for j in build_jobs(loaded)] == [j.job_id for j in build_jobs(SweepConfig.from_dict(printed))]
    assert _printed(cli, "sweep", "launch", "--config", path) == printed  # the file alone describes the sweep
    changed = _printed(cli, "sweep", "launch", "--config", path, "--n-trials", "2", "--", "--n-per-domain", "4")
    assert changed == {**printed, "n_trials": 2, "base": SweepConfig.from_dict(printed).base.replace(
        n_per_domain=4).to_dict()}
    assert "unknown setting 'n_trails'" in cli("sweep", "launch", "--config", _file(tmp_path, {"n_trails": 1})).output


def test_recipe_launch_config_file_round_trips_to_the_same_jobs(cli, tmp_path):
    from dgmoe.recipes import get_recipe
    from dgmoe.recipes.config import RecipeLaunchConfig
    from dgmoe.recipes.run import prepare

    args = ("recipe", "launch", "gmoe-table1", "--scale", "smoke", "--rows", "GMoE-S/16", "--output-dir",
            tmp_path / "r", "--n-trials", "2")
    printed = _printed(cli, *args)
    path = _file(tmp_path, printed)
    loaded = RecipeLaunchConfig.from_file(path)
    assert loaded == RecipeLaunchConfig(name="gmoe-table1", scale="smoke", rows=("GMoE-S/16",),
                                  output_dir=str(tmp_path / "r"), n_trials=2)
    assert _printed(cli, "recipe", "launch", "--config", path) == printed
    assert _printed(cli, "recipe", "launch", "--config", path, "--n-trials", "1")["n_trials"] == 1

    def job_ids(cfg: RecipeLaunchConfig) -> list[str]:
        plan = prepare(get_recipe(cfg.name), cfg.scale, cfg.folder(), cfg.data_dir, cfg.pretrained, cfg.rows, {},
                       cfg.n_hparams, cfg.n_trials)
        return [j.job_id for jobs in plan.jobs.values() for j in jobs]

    assert job_ids(loaded) == job_ids(RecipeLaunchConfig.from_dict(printed)) and job_ids(loaded)


def test_a_bad_value_names_its_flag_through_the_one_validator(cli):
    result = cli("bench", "layer", "--rounds", "2")
    assert result.exit_code == 2 and "--rounds must be >= 5, got 2" in result.output
    result = cli("sweep", "launch", "--datasets", "PACS", "--algorithms", "ERM", "--models", "m", "--output-dir", "o",
                 "--max-workers", "0")
    assert result.exit_code == 2 and "--max-workers must be >= 1, got 0" in result.output
    result = cli("geo", "benchmark", "--seeds", "a")
    assert result.exit_code == 2 and "expected a comma list of integers, got 'a'" in result.output


def _file(tmp_path, content: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(content))
    return path
