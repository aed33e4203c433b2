"""The `dgmoe` command line: a thin shell over importable functions.

Each subcommand lives in its own module of this package and exposes a click command named `command`.
`entry` (the `dgmoe` executable and `python -m dgmoe`) runs the `main` group and reports every error in
one line, `dgmoe: error: <message>`, with the exit code of `dgmoe.errors` (2 for a wrong input, 1 for a
failure); `--debug` (anywhere on the command line) or `DGMOE_DEBUG=1` adds the traceback.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
import warnings
from typing import Iterator, Sequence

import click

from dgmoe.cli.options import ListFlagsGroup
from dgmoe.errors import DgmoeError

SUBCOMMANDS = ("models", "train", "data", "results", "quickstart", "sweep", "bench", "analyze", "synthetic", "report",
               "algorithms", "geo", "recipe", "soup", "leaderboard", "export", "weights")


class _LazyGroup(ListFlagsGroup):
    """The subcommands of `SUBCOMMANDS`, each imported when named (or listed by --help); every subcommand
    module imports torch and pandas inside its function, so that help and argument errors start at once. List
    flags take DomainBed's space-separated values (`dgmoe.cli.options.ListFlagsGroup`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        return importlib.import_module(f"dgmoe.cli.{cmd_name}").command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dgmoe")
@click.option("--debug", is_flag=True, help="Show Python tracebacks of errors (also DGMOE_DEBUG=1).")
def main(debug: bool) -> None:
    """Domain generalization with sparse mixture-of-experts vision transformers."""


#: the system's refusals of a path given: bad input (exit 2), said without Python's class name
PATH_ERRORS = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)


def os_error_text(error: OSError) -> str:
    """An OSError as a person reads it: "PATH: No such file or directory" (both paths of a rename), or its own
    message when it was raised with one; never Python's class name."""
    if error.strerror and error.filename is not None:
        paths = f"{error.filename}" + (f" -> {error.filename2}" if error.filename2 is not None else "")
        return f"{paths}: {error.strerror}"
    return str(error) or error.strerror or "a file system error"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


#: the folder of dgmoe's own modules: a warning raised there is said as a dgmoe line (`_dgmoe_lines`)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _dgmoe_lines() -> Iterator[None]:
    """While a command runs, a Python warning dgmoe raises (an unfinished run skipped, a run left out) is printed
    as one line, `warning: ...`, on stderr, without Python's file, line and category; other packages' warnings
    keep Python's form."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if os.path.abspath(str(filename)).startswith(PACKAGE_DIR + os.sep):
            click.echo(f"warning: {_one_line(str(message))}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line on `argv` (default: sys.argv); return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("DGMOE_DEBUG", "") not in ("", "0")
    args = [a for a in args if a != "--debug"]
    with _dgmoe_lines():
        return _run(args, debug)


def _run(args: list[str], debug: bool) -> int:
    try:
        main.main(args=args, prog_name="dgmoe", standalone_mode=False)
        return 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:  # a flag click itself rejected: unknown option, bad type, missing value
        ctx = getattr(e, "ctx", None)  # only click's UsageError has one
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        click.echo(f"dgmoe: error: {_one_line(e.format_message())}{where}", err=True)
        return e.exit_code
    except (KeyboardInterrupt, click.Abort):
        click.echo("dgmoe: interrupted", err=True)
        return 130
    except DgmoeError as e:
        if debug:
            traceback.print_exc()
        click.echo(f"dgmoe: error: {_one_line(str(e))}", err=True)
        return e.exit_code
    except OSError as e:  # a path that is not what the command needs: what the system said, of which path
        if debug:
            traceback.print_exc()
        click.echo(f"dgmoe: error: {_one_line(os_error_text(e))}", err=True)
        return 2 if isinstance(e, PATH_ERRORS) else 1
    except Exception as e:  # not a user's mistake: one line still, and how to see more
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (run with --debug for the traceback)"
        click.echo(f"dgmoe: error: {type(e).__name__}: {_one_line(str(e))}{hint}", err=True)
        return 1


def entry() -> None:
    sys.exit(run())
