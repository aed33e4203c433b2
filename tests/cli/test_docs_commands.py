"""The README and docs cannot drift from the command line: every `dgmoe ...` command they show (in code blocks
and inline code) names subcommands and flags that exist, each flag with a value its type accepts. Nothing is run:
each line is parsed by the command's own click parser (after dgmoe's list-flag spreading), and each value is
converted by the flag's own type. Placeholders are skipped: `...`, upper-case names (`DATA`, `RUN_DIR`) and values
that contain them (`DATA/PACS`); the example paths are not required to exist.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from dgmoe.cli import main
from dgmoe.cli.options import spread_lists

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: the commands whose words after `--` are `dgmoe train` flags (every job of a sweep or recipe runs them)
FORWARDS_TO_TRAIN = {("sweep", "launch"), ("recipe", "launch")}
MISSING_PATH = re.compile(r"does not exist|No such file or directory")
#: documented commands that show a flag which does not exist on purpose, with the reason
HYPOTHETICAL = {("extending.md", "--step-log"): "the walk-through of adding a setting shows the flag it adds"}
PLACEHOLDER = re.compile(r"\.\.\.|…|<[^>]*>|\b[A-Z][A-Z0-9_]{1,}\b")


@dataclass(frozen=True)
class DocCommand:
    where: str   # file:line
    words: tuple[str, ...]  # after `dgmoe`
    inline: bool = False  # an inline code span of prose, which may name a flag without its value


def _join_continuations(lines: list[str]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, line in enumerate(lines, 1):
        text = line.rstrip()
        if not buffer:
            start = number
        if text.endswith("\\"):
            buffer += text[:-1] + " "
            continue
        out.append((start, buffer + text))
        buffer = ""
    return out


def _words(text: str) -> list[str] | None:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose: not a command
        return None


def _command_words(words: list[str]) -> tuple[str, ...] | None:
    """The words after `dgmoe` (or `python -m dgmoe` / `torchrun ... -m dgmoe`), or None."""
    for i, word in enumerate(words):
        if word == "dgmoe" and (i == 0 or words[i - 1] == "-m"):
            return tuple(words[i + 1:])
    return None


def doc_commands(path: Path) -> list[DocCommand]:
    """Every dgmoe command line of a Markdown file: lines of code blocks (continuations joined) and inline code."""
    commands: list[DocCommand] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced, block = False, []
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            if fenced:
                for start, text in _join_continuations([b for _, b in block]):
                    words = _words(text.strip())
                    found = _command_words(words) if words and not text.lstrip().startswith(">>>") else None
                    if found is not None:
                        commands.append(DocCommand(f"{path.name}:{block[start - 1][0]}", found))
            fenced, block = not fenced, []
            continue
        if fenced:
            block.append((number, line))
            continue
        for span in re.findall(r"`([^`]+)`", line):
            words = _words(span)
            if words and words[0] in ("dgmoe", "python", "torchrun"):
                found = _command_words(words)
                if found is not None:
                    commands.append(DocCommand(f"{path.name}:{number}", found, inline=True))
    return commands


def _placeholder(value: str) -> bool:
    return bool(PLACEHOLDER.search(value))


def _check_value(ctx: click.Context, command: click.Command, param: click.Parameter, value: str, where: str
                 ) -> list[str]:
    """One value through the flag's own type; an example path that does not exist here is not judged."""
    try:
        param.type.convert(value, param, ctx)
    except click.BadParameter as e:
        if not MISSING_PATH.search(e.format_message()):
            return [f"{where}: {command.name} {param.opts[0]} {value!r}: {e.format_message()}"]
    except Exception:  # noqa: BLE001 -- a type that needs more context than a dry parse: not judged here
        pass
    return []


def _check_values(ctx: click.Context, command: click.Command, opts: dict, where: str) -> list[str]:
    problems = []
    for param in command.params:
        if param.name not in opts or isinstance(param.type, (click.Path, click.File)):
            continue
        values = opts[param.name]
        for given in values if isinstance(values, (list, tuple)) else [values]:
            if not isinstance(given, str) or _placeholder(given):
                continue
            for value in given.split("|"):  # a synopsis's alternatives, `--weights best|last`: each must be valid
                problems += _check_value(ctx, command, param, value, where)
    return problems


def _takes_value(cmd: click.Command, flag: str) -> bool:
    return any(isinstance(p, click.Option) and flag in p.opts and not p.is_flag for p in cmd.params)


def check(command: DocCommand) -> list[str]:
    """What is wrong with one documented command line: an unknown subcommand, an unknown flag, a flag missing its
    value, a value the flag's type refuses. Empty when the line is valid."""
    words = [w.strip("[]") for w in command.words if w not in ("...", "…", "[", "]") and w.strip("[]")]
    cmd: click.Command = main
    ctx = click.Context(main, info_name="dgmoe")
    path: list[str] = []
    while isinstance(cmd, click.Group):
        names = [w for w in words if not w.startswith("-")]
        if not names:
            return []  # `dgmoe --help` and the like
        if _placeholder(names[0]):
            return []
        sub = cmd.get_command(ctx, names[0])
        if sub is None:
            return [f"{command.where}: 'dgmoe {' '.join(path + [names[0]])}' is not a dgmoe command"]
        path.append(names[0])
        words = words[words.index(names[0]) + 1:]
        cmd = sub
        ctx = click.Context(cmd, info_name=names[0], parent=ctx)
    tail: list[str] = []
    if "--" in words:
        words, tail = words[:words.index("--")], words[words.index("--") + 1:]
    if command.inline and words and words[-1].startswith("--"):
        words = words[:-1] + [words[-1].split("=")[0], "VALUE"] if _takes_value(cmd, words[-1]) else words
    args = spread_lists(cmd.params, words)
    parser = cmd.make_parser(ctx)
    try:
        opts, _, _ = parser.parse_args(args=args)
    except click.UsageError as e:
        problem = f"{command.where}: dgmoe {' '.join(path)}: {e.format_message()}"
        shown_on_purpose = any(command.where.split(":")[0] == doc and flag in problem for doc, flag in HYPOTHETICAL)
        return [] if shown_on_purpose else [problem]
    problems = _check_values(ctx, cmd, opts, command.where)
    if tail:
        if tuple(path) not in FORWARDS_TO_TRAIN:
            problems.append(f"{command.where}: dgmoe {' '.join(path)} takes no words after --")
        else:
            problems += check(DocCommand(command.where, ("train", *tail)))
    return problems


ALL = [c for doc in DOCS for c in doc_commands(doc)]


def test_the_docs_show_commands():
    """The parser finds the README's three commands and many more (a parser that finds nothing checks nothing)."""
    readme = [c.words for c in ALL if c.where.startswith("README.md")]
    assert ("quickstart", "--output-dir", "runs/quickstart") in readme
    assert len(ALL) > 100


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_documented_command_exists_with_valid_flags(doc):
    problems = [p for c in ALL if c.where.startswith(doc.name + ":") for p in check(c)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("line, expected", [
    ("dgmoe train --dataset PACS --made-up-flag 3", "--made-up-flag"),
    ("dgmoe trian --dataset PACS", "'dgmoe trian' is not a dgmoe command"),
    ("dgmoe data chek DATA/PACS", "'dgmoe data chek' is not a dgmoe command"),
    ("dgmoe train --steps many", "'many'"),
    ("dgmoe results runs --selection", "requires an argument"),
    ("dgmoe sweep launch --datasets PACS -- --made-up-flag 1", "--made-up-flag"),
])
def test_a_made_up_command_or_flag_fails(tmp_path, line, expected):
    """The check can fail: a made-up flag, subcommand or value in a doc is reported with its file and line."""
    doc = tmp_path / "doc.md"
    doc.write_text(f"Text.\n\n```bash\n{line}   # a comment\n```\n", encoding="utf-8")
    found = doc_commands(doc)
    assert len(found) == 1
    problems = check(found[0])
    assert problems and expected in problems[0] and problems[0].startswith("doc.md:4"), problems
