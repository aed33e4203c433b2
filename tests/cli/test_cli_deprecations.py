"""Deprecated values keep working for one release: replaced by their successor with one warning line naming it
(on the command line and in a `--config`-style dict alike), and left out of `--help`."""
from __future__ import annotations

import dataclasses

from dgmoe.bench.config import StemBenchConfig
from dgmoe.cli import run


def test_a_deprecated_value_runs_its_replacement_with_one_warning(capsys):
    code = run(["bench", "stem", "--reference", "previous", "--rounds", "1"])  # refused later, on --rounds
    err = capsys.readouterr().err
    assert code == 2 and "--rounds" in err
    warning = [line for line in err.splitlines() if "deprecated" in line]
    assert warning == [warning[0]] and warning[0].startswith("dgmoe: warning: --reference previous is deprecated")
    assert "running --reference timm" in warning[0]


def test_a_deprecated_value_in_a_config_is_replaced(capsys):
    assert StemBenchConfig(reference="previous").reference == "timm"
    assert "--reference previous is deprecated" in capsys.readouterr().err
    assert StemBenchConfig(reference="auto").reference == "auto"
    assert capsys.readouterr().err == ""


def test_help_offers_only_current_values(capsys):
    assert run(["bench", "stem", "--help"]) == 0
    out = capsys.readouterr().out
    assert "[auto|timm]" in out and "previous" not in out


def test_every_deprecated_value_is_in_the_changelog():
    from pathlib import Path

    changelog = (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text(encoding="utf-8")
    deprecated = changelog.split("### Deprecated", 1)[1].split("\n## ", 1)[0]
    for f in dataclasses.fields(StemBenchConfig):
        for value in f.metadata.get("deprecated") or {}:
            assert f"--{f.name} {value}" in deprecated, f"CHANGELOG.md lists no deprecation of --{f.name} {value}"
