"""The declaration language of run settings: a dataclass field with its help text and constraints.

`setting(...)` declares one knob once: its default, help, constraints and (optionally) its flat name, the
name of its `dgmoe train` flag and of its key in DomainBed records. Everything else derives from the
declaration: validation (`validate`), the command line (`dgmoe.cli.options`) and the flat view of a run
(`dgmoe.engine.config.RunConfig.flat`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import field
from typing import Any, Mapping

from dgmoe.errors import UsageError


class ConfigError(UsageError):
    """A run setting with a wrong type or value; the message names its flag."""


def setting(default: Any, help: str, *, key: str | None = None, minimum: float | None = None,
            maximum: float | None = None, choices: tuple[str, ...] | None = None, exclusive_max: bool = False,
            exclusive_min: bool = False) -> Any:
    """A config field with its help text and constraints; `key` is its flat name when the field's own name
    would be ambiguous outside its section (`model.name` is `--model`)."""
    meta = {"help": help, "key": key, "minimum": minimum, "maximum": maximum, "choices": choices,
            "exclusive_min": exclusive_min, "exclusive_max": exclusive_max}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def key_of(f: dataclasses.Field) -> str:
    """The flat name of a field: its flag without dashes and its key in records."""
    return f.metadata.get("key") or f.name


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def parse_json_object(text: str, key: str) -> dict[str, Any]:
    """A JSON object given on the command line; '' means {}."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag(key)} is not valid JSON ({e.msg} at character {e.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag(key)} must be a JSON object such as '{{\"key\": value}}', got {text!r}")
    return value


def kind_of(hint: Any) -> tuple[Any, bool]:
    """(base type, optional) of a field's annotation: str, int, float, bool, tuple, dict."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return origin, optional


def normalise(config: Any) -> None:
    """Coerce the spellings a command line or a JSON file gives (JSON text for objects, lists for tuples)
    into the field types, in place on a frozen dataclass, before `validate`."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value, base = getattr(config, f.name), kind_of(hints[f.name])[0]
        if base is dict and isinstance(value, str):
            object.__setattr__(config, f.name, parse_json_object(value, key_of(f)))
        elif base is tuple and isinstance(value, list):
            object.__setattr__(config, f.name, tuple(value))


def _check_number(key: str, value: Any, base: type, meta: Mapping[str, Any]) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if base is int and not is_int:
        raise ConfigError(f"{flag(key)} must be an integer, got {value!r}")
    if base is float and not (is_int or isinstance(value, float)):
        raise ConfigError(f"{flag(key)} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{flag(key)} must be a finite number, got {value!r}")
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if lo is not None and (value < lo or (meta.get("exclusive_min") and value == lo)):
        raise ConfigError(f"{flag(key)} must be {'>' if meta.get('exclusive_min') else '>='} {lo}, got {value!r}")
    if hi is not None and (value > hi or (meta.get("exclusive_max") and value == hi)):
        raise ConfigError(f"{flag(key)} must be {'<' if meta.get('exclusive_max') else '<='} {hi}, got {value!r}")


def validate(config: Any) -> None:
    """Check every field of a `setting`-declared dataclass against its type and constraints."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value, meta, key = getattr(config, f.name), f.metadata, key_of(f)
        base, optional = kind_of(hints[f.name])
        if value is None:
            if not optional:
                raise ConfigError(f"{flag(key)} is required")
            continue
        if base is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{flag(key)} must be true or false, got {value!r}")
        elif base in (int, float):
            _check_number(key, value, base, meta)
        elif base is str:
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{flag(key)} must be a non-empty string, got {value!r}")
            if meta.get("choices") and value not in meta["choices"]:
                raise ConfigError(f"{flag(key)} must be one of {', '.join(meta['choices'])}; got {value!r}")
        elif base is tuple:
            if isinstance(value, (str, bytes)) or not isinstance(value, tuple):
                raise ConfigError(f"{flag(key)} must be a list of integers, got {value!r}")
            for item in value:
                _check_number(key, item, int, meta)
        elif base is dict:
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise ConfigError(f"{flag(key)} must be a JSON object with string keys, got {value!r}")
