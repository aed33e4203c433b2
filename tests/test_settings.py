"""The declaration language (`dgmoe.settings`): one `setting()` per knob, validated on construction by the one
validator, normalised from command-line and JSON spellings, and written to and read from JSON files."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import pytest

from dgmoe.errors import UsageError
from dgmoe.settings import (
    ConfigError,
    Settings,
    comma_floats,
    comma_ints,
    comma_names,
    existing_file,
    existing_folder,
    flag_of,
    key_of,
    parse_json_object,
    plain,
    setting,
)


@dataclass(frozen=True)
class Inner(Settings):
    depth: int = setting(2, "Blocks.", minimum=1)


@dataclass(frozen=True)
class Toy(Settings):
    steps: int = setting(10, "Steps.", minimum=1)
    rate: float = setting(0.5, "A rate in (0, 1).", minimum=0, maximum=1, exclusive_min=True, exclusive_max=True)
    name: str = setting("a", "A name.", choices=("a", "b"))
    mode: Literal["x", "y"] = setting("x", "A literal.")
    label: str | None = setting(None, "Optional.")
    run_dir: str = setting("", "A positional.", argument=True, required=True)
    verbose: bool = setting(False, "Talk.", flags=("--verbose", "-v"))
    envs: tuple[int, ...] = setting((0,), "Domains.", minimum=0, key="test_envs")
    sets: tuple[tuple[int, ...], ...] = setting((), "Lists of domains.")
    names: tuple[str, ...] = setting(("p",), "Names.", choices=("p", "q"))
    extra: dict = setting({}, "JSON.")
    inner: Inner = field(default_factory=Inner)


def toy(**changes) -> Toy:
    return Toy(**{"run_dir": "r", **changes})


def test_defaults_are_valid_and_a_dict_default_is_not_shared():
    a, b = toy(), toy()
    assert (a.steps, a.rate, a.name, a.envs, a.inner.depth) == (10, 0.5, "a", (0,), 2)
    assert a.extra == {} and a.extra is not b.extra


@pytest.mark.parametrize("changes,message", [
    ({"steps": 0}, "--steps must be >= 1, got 0"),
    ({"steps": 1.5}, "--steps must be an integer, got 1.5"),
    ({"steps": True}, "--steps must be an integer, got True"),
    ({"rate": 0}, "--rate must be > 0, got 0"),
    ({"rate": 1.0}, "--rate must be < 1, got 1.0"),
    ({"rate": float("nan")}, "--rate must be a finite number"),
    ({"rate": "0.5"}, "--rate must be a number"),
    ({"name": "c"}, "--name must be one of a, b; got 'c'"),
    ({"name": ""}, "--name must be a non-empty string"),
    ({"mode": "z"}, "--mode must be one of x, y; got 'z'"),
    ({"run_dir": ""}, "RUN_DIR is required"),
    ({"verbose": "yes"}, "--verbose must be true or false"),
    ({"envs": (0, -1)}, "--test-envs must be >= 0, got -1"),
    ({"envs": "0"}, "--test-envs must be a list of integers"),
    ({"sets": ((0, "a"),)}, "--sets must be an integer"),
    ({"names": ("p", "")}, "--names must be a list of non-empty names"),
    ({"names": ("p", "r")}, "--names must be among p, q; got 'r'"),
    ({"extra": {1: 2}}, "--extra must be a JSON object with string keys"),
    ({"extra": "[1]"}, "--extra must be a JSON object"),
    ({"extra": "{bad"}, "--extra is not valid JSON"),
    ({"inner": 3}, "--inner must be a Inner"),
    ({"inner": {"depth": 0}}, "--depth must be >= 1, got 0"),
])
def test_the_one_validator_names_the_flag(changes, message):
    with pytest.raises(ConfigError) as info:
        toy(**changes)
    assert message in str(info.value)
    assert isinstance(info.value, UsageError)  # a usage error: one line, exit 2 on the command line


def test_an_optional_setting_may_be_none_and_a_required_one_may_not():
    assert toy(label=None).label is None
    with pytest.raises(ConfigError, match="RUN_DIR is required"):
        Toy(run_dir=None)  # type: ignore[arg-type]


def test_command_line_and_json_spellings_are_normalised():
    cfg = toy(envs=[1, 2], sets=[[0, 1], [2]], extra='{"k": 1}', inner={"depth": 3})
    assert cfg.envs == (1, 2) and cfg.sets == ((0, 1), (2,)) and cfg.extra == {"k": 1}
    assert isinstance(cfg.inner, Inner) and cfg.inner.depth == 3


def test_names_and_flags_come_from_the_declaration():
    fields = {f.name: f for f in Toy.__dataclass_fields__.values()}
    assert key_of(fields["envs"]) == "test_envs" and flag_of(fields["envs"]) == "--test-envs"
    assert flag_of(fields["verbose"]) == "--verbose" and flag_of(fields["run_dir"]) == "RUN_DIR"
    assert key_of(fields["steps"]) == "steps" and flag_of(fields["steps"]) == "--steps"


def test_json_round_trip_through_a_file(tmp_path):
    cfg = toy(steps=7, envs=(1, 2), sets=((0, 1),), extra={"k": [1, 2]}, inner=Inner(depth=4))
    data = cfg.to_dict()
    assert data["envs"] == [1, 2] and data["sets"] == [[0, 1]] and data["inner"] == {"depth": 4}
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(data))
    assert Toy.from_file(path) == cfg


def test_from_dict_refuses_an_unknown_setting_with_the_closest_name():
    with pytest.raises(ConfigError, match="unknown setting 'stepz'; did you mean 'steps'"):
        Toy.from_dict({"run_dir": "r", "stepz": 3})


@pytest.mark.parametrize("content,message", [
    (None, "no such file"),
    ("{not json", "is not a readable JSON file"),
    ("[1, 2]", "must hold a JSON object"),
    ('{"run_dir": "r", "steps": 0}', "--steps must be >= 1"),
])
def test_a_bad_config_file_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "cfg.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        Toy.from_file(path)
    assert str(info.value).startswith(f"--config {path}") and message in str(info.value)


def test_the_parsers_of_list_options():
    assert comma_ints("0, 1,2,") == (0, 1, 2) and comma_floats("0.7,1") == (0.7, 1.0)
    assert comma_names(" a, b ,") == ("a", "b")
    with pytest.raises(ValueError, match="comma list of integers"):
        comma_ints("1,x")
    with pytest.raises(ValueError, match="comma-separated numbers"):
        comma_floats("1,x")


def test_the_parsers_of_paths(tmp_path):
    (tmp_path / "f").write_text("")
    assert existing_folder(str(tmp_path)) == str(tmp_path) and existing_file(str(tmp_path / "f")) == str(tmp_path / "f")
    with pytest.raises(ValueError, match="does not exist"):
        existing_folder(str(tmp_path / "f"))
    with pytest.raises(ValueError, match="does not exist"):
        existing_file(str(tmp_path))


def test_json_object_option_and_plain_values():
    assert parse_json_object("  ", "--x") == {}
    assert plain((1, (2, 3))) == [1, [2, 3]] and plain(Inner()) == {"depth": 2}
    source = {"a": [1]}
    copied = plain(source)
    assert copied == source and copied["a"] is not source["a"]
