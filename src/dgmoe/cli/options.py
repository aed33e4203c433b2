"""Click options generated from typed configs (the run description `dgmoe.engine.config.RunConfig`, and the
config of every other command: sweeps, launchers, benchmarks, experiments, data), so that a new setting is one
declaration (`dgmoe.settings.setting`): its flag, type, default, help and constraints come from the field.
Every option and argument of every command is a `SettingOption` or `SettingArgument` of a config field, but
`--config`/`--print-config` (`config_file_options`) and `--help`; `tests/cli/test_cli_options.py` checks it.

`bool` fields become `--name/--no-name`, `tuple[int, ...]` a repeatable flag, `dict` a JSON-object flag,
`choices` (or a `Literal`) a `click.Choice`, a field with a `parser` one text option parsed by it (comma
lists, `NAME=SECONDS` pairs). A list flag takes DomainBed's space-separated values (`--test_envs 0 1`), repeats
(`--test-envs 0 --test-envs 1`) and comma lists (`--test-envs 0,1`) alike (`ListFlagsGroup`). Only the flags
a user gives are applied, over the dataclass defaults or over a `--config FILE`, so defaults are declared once;
values are validated by the config, which names the flag.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Iterable, Sequence

import click
from click.core import ParameterSource

from dgmoe.engine.config import RunConfig
from dgmoe.settings import (
    ConfigError,
    choices_of,
    comma_ints,
    default_of,
    flag,
    item_kind,
    key_of,
    kind_of,
    replace_deprecated,
)

LIST_HINT = "space-separated, repeat the flag or use a comma list"


class IndexList(click.ParamType):
    """One integer of a list flag (`--test-envs`); its error says how a list is written."""

    name = "integer"
    commas = True  # `spread_lists` splits comma lists

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            self.fail(f"expected integers ({LIST_HINT}), got {value!r}", param, ctx)


INDEX_LIST = IndexList()


class NameList(click.ParamType):
    """One name of a list flag whose items may be comma lists (`--datasets PACS,VLCS`)."""

    name = "text"
    commas = True

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return str(value)


NAME_LIST = NameList()


class ChoiceList(click.Choice):
    """One of a list flag's choices, whose items may also be comma lists (`--method uniform,greedy`)."""

    commas = True


class RetiringChoice(click.Choice):
    """A setting's choices, which also takes its deprecated values (`setting(deprecated=...)`), each replaced by
    its successor with a one-line warning; `--help` shows only the current choices."""

    def __init__(self, choices: Sequence[str], setting: dataclasses.Field) -> None:
        super().__init__(choices)
        self.setting = setting

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(replace_deprecated(self.setting, value), param, ctx)


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
        if getattr(option.type, "commas", False):
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


class SettingOption(click.Option):
    """A click option generated from one field of a config (`setting_param`)."""

    def __init__(self, *args: Any, config: type, setting: dataclasses.Field, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.config, self.setting = config, setting


class SettingArgument(click.Argument):
    """A positional argument generated from one field of a config (`setting(..., argument=True)`)."""

    def __init__(self, *args: Any, config: type, setting: dataclasses.Field, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.config, self.setting = config, setting


class Parsed(click.ParamType):
    """The text of an option turned into its field's value by the field's `parser` (a ValueError's message
    is the error); a value that is not text (a default) is kept."""

    def __init__(self, parser: Callable[[str], Any], name: str) -> None:
        self.parser, self.name = parser, name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.parser(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


def _names(key: str, base: Any, domainbed: bool) -> list[str]:
    """The flag, and DomainBed's underscore spelling of it (`--test_envs`, `--skip_model_save`) for the
    configs that keep DomainBed's names."""
    names = [flag(key)] + (["--" + key] if domainbed and "_" in key else [])
    if base is bool:
        return [f"{n}/--no{'-' if n == flag(key) else '_'}{n[2:]}" for n in names]
    return names


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _option_maker(names: list[str], required: bool) -> Callable[..., Callable]:
    """click.option over `names`; a required option gets no default (click 8.4 counts a None default as given)."""
    def make(**kw: Any) -> Callable:
        if required:
            kw.pop("default", None)
            kw["show_default"] = False
        return click.option(*names, **kw)

    return make


def setting_param(config: type, f: dataclasses.Field, hint: Any, click_required: bool = True) -> Callable:
    """The click option (or argument) of one field; `click_required=False` leaves a required field to the
    config's own check (a command that also reads a `--config` file)."""
    base, _ = kind_of(hint)
    key, meta, default = key_of(f), f.metadata, default_of(f)
    if meta.get("required"):
        default = None  # nothing to show
    common: dict[str, Any] = {"cls": SettingArgument if meta.get("argument") else SettingOption, "config": config,
                              "setting": f}
    parser = meta.get("parser")
    if meta.get("argument") and base is tuple:  # NAMES...: any number of values
        return click.argument(key, type=str, nargs=-1, metavar=meta.get("metavar") or f"{key.upper()}...",
                              required=bool(meta.get("required")) and click_required, **common)
    if meta.get("argument"):
        kind = Parsed(parser, key) if parser else str
        if not meta.get("required"):
            common["default"] = default
        return click.argument(key, type=kind, metavar=meta.get("metavar") or key.upper(),
                              required=bool(meta.get("required")) and click_required, **common)
    explicit = meta.get("flags")
    names = [*(explicit or _names(key, base, getattr(config, "DOMAINBED_FLAGS", False))), key]
    common.update(help=meta.get("help", ""), hidden=bool(meta.get("hidden")),
                  required=bool(meta.get("required")) and click_required, metavar=meta.get("metavar"))
    option = _option_maker(names, bool(meta.get("required")))
    if base is bool:
        if explicit:
            return option(is_flag=True, default=default, **common)
        return option(default=default, **{"show_default": True, **common})
    if parser:  # the default as typed (`--seeds 0,1,2`), or as `shown` says
        text = meta.get("shown") or (_shown(default) if default not in (None, (), "") else None)
        return option(type=Parsed(parser, key), default=text, show_default=text is not None, **common)
    if base is tuple:
        item: Any = {int: INDEX_LIST, float: float, tuple: Parsed(comma_ints, "integers")}.get(item_kind(hint), str)
        if meta.get("commas"):
            item = NAME_LIST
        allowed = choices_of(f, hint)
        if allowed:
            item = ChoiceList(allowed)  # (the help offers comma lists: LIST_HINT)
        hint_text = common["help"].rstrip(".")
        common["help"] = f"{hint_text}: {LIST_HINT}." if hint_text else f"({LIST_HINT})"
        return option(multiple=True, type=item, default=default, **{"show_default": True, **common})
    if base is dict:
        return option(default="", **{"show_default": False, **common})
    choices = choices_of(f, hint)
    if choices:
        choice: click.Choice = RetiringChoice(choices, f) if meta.get("deprecated") else click.Choice(choices)
        return option(type=choice, default=default, **{"show_default": True, **common})
    scalar: type = {int: int, float: float}.get(base, str)
    return option(type=scalar, default=default, **{"show_default": default not in (None, ""), **common})


def config_fields(config: type, only: Iterable[str] | None = None,
                  skip: Iterable[str] = ()) -> list[tuple[type, dataclasses.Field, Any]]:
    """(declaring class, field, type hint) of every setting of `config` (of every section of a `RunConfig`, in
    its flag order), or of the flat keys in `only`, but those in `skip`, in declaration order; nested configs are
    left out."""
    wanted, unwanted = (set(only) if only is not None else None), set(skip)
    pairs = ([(kind, f) for _, kind, f in config.flag_fields()] if hasattr(config, "flag_fields")
             else [(config, f) for f in dataclasses.fields(config)])
    hints = {kind: typing.get_type_hints(kind) for kind, _ in pairs}
    return [(kind, f, hints[kind][f.name]) for kind, f in pairs
            if (wanted is None or key_of(f) in wanted) and key_of(f) not in unwanted
            and not dataclasses.is_dataclass(kind_of(hints[kind][f.name])[0])]


def config_options(config: type, only: Iterable[str] | None = None, skip: Iterable[str] = (),
                   click_required: bool = True) -> Callable:
    """A decorator adding one click option (or argument) per field of `config` (see `config_fields`)."""
    only, skip = (tuple(only) if only is not None else None), tuple(skip)
    fields = config_fields(config, only, skip)

    def decorate(fn: Callable) -> Callable:
        for kind, f, hint in reversed(fields):
            fn = setting_param(kind, f, hint, click_required)(fn)
        declared = getattr(fn, "dgmoe_configs", [])  # what the command declares it reads (tests check it)
        fn.dgmoe_configs = [(config, only, skip), *declared]  # type: ignore[attr-defined]
        return fn

    return decorate


def config_file_options(what: str) -> Callable:
    """`--config FILE` (start from a config file; flags given beside it override it) and `--print-config`
    (print the config the command line describes as JSON, which `--config` reads back, and exit)."""
    def decorate(fn: Callable) -> Callable:
        fn = click.option("--print-config", is_flag=True,
                          help=f"Print the {what} config as JSON and exit without running it.")(fn)
        return click.option("--config", "config_file", type=click.Path(dir_okay=False),
                            help=f"Start from this {what} config (a file `--print-config` wrote); flags given "
                                 "beside it override its values.")(fn)

    return decorate


def given_values(ctx: click.Context, values: dict[str, Any], config: type, only: Iterable[str] | None = None,
                 skip: Iterable[str] = ()) -> dict[str, Any]:
    """The settings of `config` the user gave on the command line (or through the environment), by flat key."""
    out = {}
    params = {p.name: p for p in ctx.command.params}
    for _, f, hint in config_fields(config, only, skip):
        key = key_of(f)
        if key not in values or ctx.get_parameter_source(key) in (ParameterSource.DEFAULT, None):
            continue
        if getattr(params.get(key), "setting", f) is not f:  # another config's option of the same name
            continue
        value = values[key]
        out[key] = tuple(value) if kind_of(hint)[0] is tuple else value
    return out


def build_config(config: type, ctx: click.Context, values: dict[str, Any], start: Any = None,
                 skip: Iterable[str] = (), **fixed: Any) -> Any:
    """The config the command line describes: the given flags (and `fixed` fields) over `start` (a `--config`
    file) or the defaults; the config validates itself (one error naming the flag)."""
    by_key = {key_of(f): f.name for _, f, _ in config_fields(config)}
    changes = {by_key[k]: v for k, v in given_values(ctx, values, config, skip=skip).items()}
    changes.update(fixed)
    try:
        return dataclasses.replace(start, **changes) if start is not None else config(**changes)
    except ConfigError as e:  # reported as click reports a bad flag (with the command's --help)
        raise click.UsageError(str(e), ctx) from None


def print_config(cfg: Any) -> None:
    import json

    click.echo(json.dumps(cfg.to_dict(), indent=1))


def run_fields(only: Iterable[str] | None = None) -> list[tuple[str, dataclasses.Field, Any]]:
    """(section, field, type hint) of every run setting, or of the flat keys in `only`, in declaration order."""
    sections = {kind: name for name, kind in RunConfig.sections().items()}
    return [(sections[kind], f, hint) for kind, f, hint in config_fields(RunConfig, only)]


def run_options(only: Iterable[str] | None = None) -> Callable:
    """A decorator adding one click option per run setting (or per flat key in `only`)."""
    return config_options(RunConfig, only)


def given_settings(ctx: click.Context, values: dict[str, Any], only: Iterable[str] | None = None) -> dict[str, Any]:
    """The run settings the user gave on the command line (or through the environment), as flat keys."""
    return given_values(ctx, values, RunConfig, only)


def config_from_options(ctx: click.Context, values: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
    """The run the command line describes: the given flags over `base` (a `--config` file) or the defaults.
    Without `--test-envs` (and without `base`) a dataset with evaluation-only domains (FMoW, FMoW-LAO,
    iWildCam) holds out those domains, WILDS' official split, as the sweep does (`evaluation_envs`)."""
    given = given_settings(ctx, values)
    if base is None and "test_envs" not in given:
        from dgmoe.names import evaluation_envs  # (declared names: no torch)

        official = evaluation_envs(given.get("dataset", RunConfig().data.dataset))
        if official:
            given["test_envs"] = tuple(official)
    return RunConfig.from_flat(given, base=base)
