"""Click options generated from the run description (`dgmoe.engine.config.RunConfig`), so that a new run
setting is one declaration: its flag, type, default, help and constraints come from the field.

`bool` fields become `--name/--no-name`, `tuple[int, ...]` a repeatable flag, `dict` a JSON-object flag,
`choices` a `click.Choice`. Only the flags a user gives are applied, over the dataclass defaults or over a
`--config FILE`, so defaults are declared once; values are validated by the config, which names the flag.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Iterable

import click
from click.core import ParameterSource

from dgmoe.engine.config import RunConfig
from dgmoe.engine.settings import flag, key_of, kind_of


def _names(key: str, base: Any) -> list[str]:
    """The flag, and DomainBed's underscore spelling of it (`--test_envs`, `--skip_model_save`)."""
    names = [flag(key)] + (["--" + key] if "_" in key else [])
    if base is bool:
        return [f"{n}/--no{'-' if n == flag(key) else '_'}{n[2:]}" for n in names]
    return names


def _option(f: dataclasses.Field, hint: Any, section: str) -> Callable:
    base, _ = kind_of(hint)
    key, meta = key_of(f), f.metadata
    if f.default is not dataclasses.MISSING:
        default = f.default
    else:  # every field has a default or a default factory
        assert f.default_factory is not dataclasses.MISSING
        default = f.default_factory()
    names = [*_names(key, base), key]
    help_text = f"{meta.get('help', '')}"
    if base is bool:
        return click.option(*names, default=default, show_default=True, help=help_text)
    if base is tuple:
        return click.option(*names, multiple=True, type=int, default=default, show_default=True, help=help_text)
    if base is dict:
        return click.option(*names, default="", show_default=False, help=help_text)
    if meta.get("choices"):
        return click.option(*names, type=click.Choice(meta["choices"]), default=default, show_default=True,
                            help=help_text)
    kind = {int: int, float: float}.get(base, str)
    return click.option(*names, type=kind, default=default, show_default=default is not None, help=help_text)


def run_fields(only: Iterable[str] | None = None) -> list[tuple[str, dataclasses.Field, Any]]:
    """(section, field, type hint) of every run setting, or of the flat keys in `only`, in declaration order."""
    wanted = set(only) if only is not None else None
    out = []
    for section, kind in RunConfig.sections().items():
        hints = typing.get_type_hints(kind)
        out += [(section, f, hints[f.name]) for f in dataclasses.fields(kind)
                if wanted is None or key_of(f) in wanted]
    return out


def run_options(only: Iterable[str] | None = None) -> Callable:
    """A decorator adding one click option per run setting (or per flat key in `only`)."""
    fields = run_fields(only)

    def decorate(fn: Callable) -> Callable:
        for section, f, hint in reversed(fields):
            fn = _option(f, hint, section)(fn)
        return fn

    return decorate


def given_settings(ctx: click.Context, values: dict[str, Any], only: Iterable[str] | None = None) -> dict[str, Any]:
    """The run settings the user gave on the command line (or through the environment), as flat keys."""
    out = {}
    for _, f, hint in run_fields(only):
        key = key_of(f)
        if key not in values or ctx.get_parameter_source(key) in (ParameterSource.DEFAULT, None):
            continue
        value = values[key]
        out[key] = tuple(value) if kind_of(hint)[0] is tuple else value
    return out


def config_from_options(ctx: click.Context, values: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
    """The run the command line describes: the given flags over `base` (a `--config` file) or the defaults.
    Without `--test-envs` (and without `base`) a dataset with evaluation-only domains (FMoW, FMoW-LAO,
    iWildCam) holds out those domains, WILDS' official split, as the sweep does (`evaluation_envs`)."""
    given = given_settings(ctx, values)
    if base is None and "test_envs" not in given:
        from dgmoe.data.catalogue import evaluation_envs

        official = evaluation_envs(given.get("dataset", RunConfig().data.dataset))
        if official:
            given["test_envs"] = tuple(official)
    return RunConfig.from_flat(given, base=base)
