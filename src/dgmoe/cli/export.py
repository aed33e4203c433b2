"""`dgmoe export`: a run's weights in another tool's format (`dgmoe export peft`: LoRA as a peft adapter)."""
from __future__ import annotations

from typing import Any

import click

from dgmoe.cli.options import build_config, config_options
from dgmoe.engine.export import PeftExportConfig


@click.group("export")
def command() -> None:
    """Write a run's weights in another tool's format."""


@command.command("peft")
@config_options(PeftExportConfig)
@click.pass_context
def peft(ctx: click.Context, **kw: Any) -> None:
    """Write the LoRA weights (and the classifier) of a `--peft lora` run as a peft adapter folder
    (adapter_config.json + adapter_model.safetensors, peft's key names), for `PeftModel.from_pretrained` on the
    run's architecture with its base weights (the run's --pretrained file)."""
    from dgmoe.engine.export import export_peft

    folder = export_peft(build_config(PeftExportConfig, ctx, kw))
    click.echo(f"wrote the peft adapter {folder}")
