"""The declaration language of every command's settings: a dataclass field with its help text and constraints.

`setting(...)` declares one knob once: its default, help, constraints and (optionally) its flat name, the
name of its flag (and of its key in DomainBed records for a run setting), and how the command line spells
it. Everything else derives from the declaration: validation (`validate`, the one validator of every config:
`dgmoe train`'s run, sweeps, launchers, benchmarks, experiments), the command line of every command
(`dgmoe.cli.options`) and the flat view of a run (`dgmoe.engine.config.RunConfig.flat`). This module sits in
the bottom layer so that every package can declare its configs with it.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import sys
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from dgmoe.errors import UsageError


class ConfigError(UsageError):
    """A run setting with a wrong type or value; the message names its flag."""


def setting(default: Any, help: str, *, key: str | None = None, minimum: float | None = None,
            maximum: float | None = None, choices: tuple[str, ...] | None = None, exclusive_max: bool = False,
            exclusive_min: bool = False, flags: tuple[str, ...] | None = None,
            parser: Callable[[str], Any] | None = None, shown: str | None = None, required: bool = False,
            argument: bool = False, hidden: bool = False, metavar: str | None = None, commas: bool = False,
            deprecated: Mapping[str, tuple[str, str]] | None = None) -> Any:
    """A config field with its help text and constraints; `key` is its flat name when the field's own name
    would be ambiguous outside its section (`model.name` is `--model`).

    How the command line spells it, when not the generated default (`--<key>`, see `dgmoe.cli.options`):
    `flags` its option names (`("--verbose", "-v")`); `parser` turns the text given into the value (a comma
    list, `NAME=SECONDS` pairs; a ValueError's message is the error); `shown` is the default as `--help`
    prints it; `required` a value the command line (or a `--config` file) must give; `argument` a positional
    argument; `hidden` an option kept for old command lines, left out of `--help`; `commas` a list of names
    whose items may also be comma lists (`--datasets PACS,VLCS`); on a text setting with `choices`, a comma list
    of them (`attn,fc1`). `deprecated` maps a retired value of a text setting to (its replacement, why): the
    value keeps working for one release, replaced with a one-line warning (`replace_deprecated`), and is left out
    of `--help`; CHANGELOG.md lists it under Deprecated."""
    meta = {"help": help, "key": key, "minimum": minimum, "maximum": maximum, "choices": choices,
            "exclusive_min": exclusive_min, "exclusive_max": exclusive_max, "flags": flags, "parser": parser,
            "shown": shown, "required": required, "argument": argument, "hidden": hidden, "metavar": metavar,
            "commas": commas, "deprecated": dict(deprecated or {})}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def comma_ints(text: str) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2): a parser of list options written as one comma list."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected a comma list of integers, got {text!r}") from None


def comma_floats(text: str) -> tuple[float, ...]:
    """'0.7,1' -> (0.7, 1.0)."""
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None


def comma_names(text: str) -> tuple[str, ...]:
    """'a, b' -> ('a', 'b')."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def existing_folder(text: str) -> str:
    """A folder that must exist (a parser of folder arguments)."""
    if not Path(text).is_dir():
        raise ValueError(f"Directory {text!r} does not exist.")
    return text


def existing_file(text: str) -> str:
    """A file that must exist."""
    if not Path(text).is_file():
        raise ValueError(f"File {text!r} does not exist.")
    return text


def key_of(f: dataclasses.Field) -> str:
    """The flat name of a field: its flag without dashes and its key in records."""
    return f.metadata.get("key") or f.name


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def flag_of(f: dataclasses.Field) -> str:
    """The name a message gives a field: its first declared flag, else `--<key>`; an argument's upper-case
    name."""
    if f.metadata.get("argument"):
        return key_of(f).upper()
    return (f.metadata.get("flags") or (flag(key_of(f)),))[0]


def parse_json_object(text: str, name: str) -> dict[str, Any]:
    """A JSON object given on the command line (`name` is its flag); '' means {}."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{name} is not valid JSON ({e.msg} at character {e.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object such as '{{\"key\": value}}', got {text!r}")
    return value


def kind_of(hint: Any) -> tuple[Any, bool]:
    """(base type, optional) of a field's annotation: str, int, float, bool, tuple, dict (a `Literal` of
    strings is str), or a config class (a nested config validates itself)."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    if origin is Literal:
        return str, optional
    if origin is Mapping:
        return dict, optional
    return origin, optional


def item_kind(hint: Any) -> Any:
    """The type of a tuple field's items (`tuple[int, ...]` -> int); int when the annotation does not say."""
    args = typing.get_args(hint)
    if type(None) in args:
        args = typing.get_args(next(a for a in args if a is not type(None)))
    item = args[0] if args else int
    return typing.get_origin(item) or item


def choices_of(f: dataclasses.Field, hint: Any) -> tuple[str, ...] | None:
    """A field's allowed values: its `choices`, or the strings of its `Literal` annotation."""
    if f.metadata.get("choices"):
        return tuple(f.metadata["choices"])
    args = typing.get_args(hint)
    if type(None) in args:
        hint = next(a for a in args if a is not type(None))
    return tuple(typing.get_args(hint)) if typing.get_origin(hint) is Literal else None


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (every `setting` has one)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING, f.name
    return f.default_factory()


def replace_deprecated(f: dataclasses.Field, value: Any) -> Any:
    """A deprecated value of `f` replaced by its successor, said in one line on stderr (`dgmoe: warning: ...`);
    any other value as it is."""
    retired = f.metadata.get("deprecated") or {}
    if not isinstance(value, str) or value not in retired:
        return value
    replacement, why = retired[value]
    name = flag_of(f)
    print(f"dgmoe: warning: {name} {value} is deprecated and will be removed in the next release ({why}); "
          f"running {name} {replacement}: pass that instead", file=sys.stderr)
    return replacement


def normalise(config: Any) -> None:
    """Coerce the spellings a command line or a JSON file gives (JSON text for objects, lists for tuples, a list
    for a comma list) into the field types, in place on a frozen dataclass, before `validate`."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value, base = getattr(config, f.name), kind_of(hints[f.name])[0]
        if f.metadata.get("deprecated") and value != (new := replace_deprecated(f, value)):
            object.__setattr__(config, f.name, new)
        elif base is dict and isinstance(value, str):
            object.__setattr__(config, f.name, parse_json_object(value, flag_of(f)))
        elif base is str and f.metadata.get("commas") and isinstance(value, (list, tuple)):  # a comma list's items
            object.__setattr__(config, f.name, ",".join(map(str, value)))
        elif base is tuple and isinstance(value, list):
            nested = item_kind(hints[f.name]) is tuple
            object.__setattr__(config, f.name, tuple(tuple(v) if nested and isinstance(v, list) else v
                                                     for v in value))
        elif dataclasses.is_dataclass(base) and isinstance(value, Mapping) and hasattr(base, "from_dict"):
            object.__setattr__(config, f.name, base.from_dict(value))  # type: ignore[attr-defined]


def _check_number(name: str, value: Any, base: type, meta: Mapping[str, Any]) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if base is int and not is_int:
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if base is float and not (is_int or isinstance(value, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if lo is not None and (value < lo or (meta.get("exclusive_min") and value == lo)):
        raise ConfigError(f"{name} must be {'>' if meta.get('exclusive_min') else '>='} {lo}, got {value!r}")
    if hi is not None and (value > hi or (meta.get("exclusive_max") and value == hi)):
        raise ConfigError(f"{name} must be {'<' if meta.get('exclusive_max') else '<='} {hi}, got {value!r}")


def _check_list(name: str, value: Any, item: Any, meta: Mapping[str, Any]) -> None:
    """A tuple field: integers (range-checked), numbers, non-empty strings, or tuples of integers."""
    what = {int: "integers", float: "numbers", str: "names", tuple: "lists of integers"}.get(item, "values")
    if isinstance(value, (str, bytes)) or not isinstance(value, tuple):
        raise ConfigError(f"{name} must be a list of {what}, got {value!r}")
    for one in value:
        if item is str:
            if not isinstance(one, str) or not one:
                raise ConfigError(f"{name} must be a list of non-empty names, got {value!r}")
        elif item is tuple:
            _check_list(name, one, int, meta)
        else:
            _check_number(name, one, item if item in (int, float) else int, meta)


def validate(config: Any) -> None:
    """Check every field of a `setting`-declared dataclass against its type and constraints: the one
    validator of every config of every command. A message names a field by its flag, or by its keyword in a
    config of keyword arguments (`KEYWORDS`: `dgmoe.moe.config.MoEConfig`, given as `--model-kwargs`)."""
    hints = typing.get_type_hints(type(config))
    keywords = getattr(config, "KEYWORDS", False)
    for f in dataclasses.fields(config):
        value, meta = getattr(config, f.name), f.metadata
        name = key_of(f) if keywords else flag_of(f)
        base, optional = kind_of(hints[f.name])
        if value is None or (meta.get("required") and value in ("", ())):
            if not optional or meta.get("required"):
                raise ConfigError(f"{name} is required")
            continue
        if isinstance(base, type) and dataclasses.is_dataclass(base):
            if not isinstance(value, base):
                raise ConfigError(f"{name} must be a {base.__name__}, got {value!r}")
        elif base is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be true or false, got {value!r}")
        elif base in (int, float):
            _check_number(name, value, base, meta)
        elif base is str:
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
            allowed = choices_of(f, hints[f.name])
            items = value.split(",") if meta.get("commas") else [value]
            if allowed and not set(items) <= set(allowed):
                what = "a comma list of" if meta.get("commas") else "one of"
                raise ConfigError(f"{name} must be {what} {', '.join(allowed)}; got {value!r}")
        elif base is tuple:
            _check_list(name, value, item_kind(hints[f.name]), meta)
            allowed = choices_of(f, hints[f.name]) or ()
            wrong = [v for v in value if allowed and v not in allowed]
            if wrong:
                raise ConfigError(f"{name} must be among {', '.join(allowed)}; got {wrong[0]!r}")
        elif base is dict:
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise ConfigError(f"{name} must be a JSON object with string keys, got {value!r}")


def config_from_file(cls: Any, path: str | Path, unwrap: str | None = None,
                     expected: str = "a JSON object") -> Any:
    """`cls.from_dict` of the JSON object in the `--config` file `path` (with `unwrap`, the object under that key
    when the file holds one, e.g. a run's config.json); a `ConfigError` naming the file for anything else."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"--config {path} is not a readable JSON file ({e})") from None
    if unwrap is not None and isinstance(data, dict) and isinstance(data.get(unwrap), dict):
        data = data[unwrap]
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path} must hold {expected}")
    try:
        return cls.from_dict(data)
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"--config {path}: {e}") from None


class Settings:
    """A config of `setting` fields (a frozen dataclass deriving from this): normalised and validated on
    construction, so a config that exists is valid; written to and read from JSON (`--config` files)."""

    def __post_init__(self) -> None:
        normalise(self)
        validate(self)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = [k for k in d if k not in names]
        if unknown:
            close = difflib.get_close_matches(unknown[0], names, n=1)
            raise ConfigError(f"unknown setting {unknown[0]!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
        return cls(**d)

    @classmethod
    def from_file(cls, path: str | Path) -> Any:
        """A config written by `to_dict` (`--print-config`) as a JSON file."""
        return config_from_file(cls, path)


def plain(value: Any) -> Any:
    """JSON's spelling of a setting value (tuples as lists, objects copied, nested configs as their dict)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return json.loads(json.dumps(dict(value)))
    return value
