"""What every test of a `dgmoe` command checks (tests/cli/): its `--help` (exit 0, its usage line and the
opening of its docstring), and a bad input refused the way `dgmoe.cli.run` promises: exit 2, one line
`dgmoe: error: ...` that names what was wrong, no traceback."""
from __future__ import annotations

import click

from dgmoe.cli import main


def command_at(*path: str) -> click.Command:
    """The click command `dgmoe <path>`."""
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group), path
        found = command.get_command(click.Context(command), name)
        assert found is not None, f"no command {name!r} under {command.name!r}"
        command = found
    return command


def subcommands(*path: str) -> list[str]:
    group = command_at(*path)
    assert isinstance(group, click.Group)
    return group.list_commands(click.Context(group))


def help_text(cli, *path: str) -> str:
    """`dgmoe <path> --help`, checked: exit 0, the usage line, the docstring's opening words."""
    result = cli(*path, "--help")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: dgmoe {' '.join(path)}".rstrip()), result.output[:200]
    opening = " ".join((command_at(*path).help or "").split()[:4])  # (click may wrap inside a hyphenated word)
    assert opening and opening in " ".join(result.output.split()), (opening, result.output[:400])
    return result.output


def refused(cli, *args: str, says: tuple[str, ...] = ()) -> str:
    """`dgmoe <args>` refused as bad input: exit 2, one line naming the problem (`says`), no traceback."""
    result = cli(*args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("dgmoe: error: "), result.output
    assert "Traceback" not in result.output
    for needle in says:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
