"""The `dgmoe` command line: a thin shell over importable functions.

Each subcommand lives in its own module of this package and exposes a click command named `command`.
"""
from __future__ import annotations

import importlib

import click

SUBCOMMANDS = ("models", "train", "data", "results", "quickstart", "sweep", "bench", "analyze", "synthetic", "report", "algorithms", "geo")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dgmoe")
def main() -> None:
    """Domain generalization with sparse mixture-of-experts vision transformers."""


for _name in SUBCOMMANDS:
    main.add_command(importlib.import_module(f"dgmoe.cli.{_name}").command)
