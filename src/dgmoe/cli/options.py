"""Click options generated from the run description (`dgmoe.engine.config.RunConfig`), so that a new run
setting is one declaration: its flag, type, default, help and constraints come from the field.

`bool` fields become `--name/--no-name`, `tuple[int, ...]` a repeatable flag, `dict` a JSON-object flag,
`choices` a `click.Choice`. A list flag takes DomainBed's space-separated values (`--test_envs 0 1`), repeats
(`--test-envs 0 --test-envs 1`) and comma lists (`--test-envs 0,1`) alike (`ListFlagsGroup`). Only the flags
a user gives are applied, over the dataclass defaults or over a `--config FILE`, so defaults are declared once;
values are validated by the config, which names the flag.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Iterable

import click
from click.core import ParameterSource

from dgmoe.engine.config import RunConfig
from dgmoe.engine.settings import flag, key_of, kind_of

LIST_HINT = "space-separated, repeat the flag or use a comma list"


class IndexList(click.ParamType):
    """One integer of a list flag (`--test-envs`); its error says how a list is written."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            self.fail(f"expected integers ({LIST_HINT}), got {value!r}", param, ctx)


INDEX_LIST = IndexList()


def spread_lists(params: Iterable[click.Parameter], args: list[str]) -> list[str]:
    """`--flag a b c` -> `--flag a --flag b --flag c` for every list option (`multiple=True`) in `params`, as
    DomainBed's `nargs='+'`: the values run to the next token that starts with '-'; integer lists also split
    comma lists. Everything after `--` is left as it is."""
    lists = {name: p for p in params if isinstance(p, click.Option) and p.multiple for name in p.opts}
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return out + args[i:]
        name, eq, first = token.partition("=")
        option = lists.get(name)
        if option is None or (not eq and i + 1 == len(args)):
            out.append(token)
            i += 1
            continue
        values = [first] if eq else [args[i + 1]]  # the first value is taken as given, as click would
        i += 1 if eq else 2
        while i < len(args) and not args[i].startswith("-"):
            values.append(args[i])
            i += 1
        if isinstance(option.type, IndexList):
            values = [v for value in values for v in (value.split(",") if "," in value else [value])]
        for value in values:
            out += [name, value]
    return out


class ListFlagsGroup(click.Group):
    """A group whose commands' list flags take space-separated values (see `spread_lists`)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, Any, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, click.Group):
            rest = spread_lists(cmd.params, rest)
        return name, cmd, rest


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
        return click.option(*names, multiple=True, type=INDEX_LIST, default=default, show_default=True,
                            help=f"{help_text.rstrip('.')}: {LIST_HINT}.")
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
