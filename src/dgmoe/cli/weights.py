"""`dgmoe.models.hub_weights`: fetch the pretrained checkpoints the recipes and README name (`dgmoe.weights`)."""
from __future__ import annotations

from typing import Any

import click

from dgmoe.cli.config import WeightsGetConfig
from dgmoe.cli.options import ListFlagsGroup, build_config, config_options
from dgmoe.errors import UsageError


@click.group("weights", cls=ListFlagsGroup)
def command() -> None:
    """Pretrained checkpoints: fetched from the Hugging Face Hub, checked, written as .safetensors."""


@command.command("get")
@config_options(WeightsGetConfig)
@click.pass_context
def get_cmd(ctx: click.Context, **kw: Any) -> None:
    """Fetch checkpoint NAME into --to DIR as NAME.safetensors (with NAME.json: source, revision, sha256) and
    print the --pretrained argument to pass. Needs the 'hub' extra (huggingface_hub); HF_ENDPOINT is honoured."""
    cfg = build_config(WeightsGetConfig, ctx, kw)
    from dgmoe.models.hub_weights import WEIGHTS, find, get

    if cfg.list_weights:
        for w in WEIGHTS:
            pin = w.revision if w.pinned else f"{w.revision} (not pinned)"
            click.echo(f"{w.name:<38} hf-hub:{w.repo_id}/{w.filename} @ {pin}; {w.licence}; "
                       f"fits {', '.join(w.models)}")
        return
    if cfg.name is None:
        raise UsageError("name a checkpoint: dgmoe weights get NAME --to DIR (see `dgmoe weights get --list`)")
    if cfg.to is None:
        raise UsageError("--to is required: the folder to write the checkpoint into")
    w = find(cfg.name)
    if not w.pinned:
        click.echo(f"note: {w.repo_id} is fetched at revision {w.revision}, not pinned to a commit; its sha256 "
                   "is recorded beside the file", err=True)
    got = get(cfg.name, cfg.to)
    click.echo(f"{got.path} (sha256 {got.sha256}; record {got.record_path})")
    click.echo(f"--pretrained {got.path}")
