"""`dgmoe train`: one DomainBed run. Every flag is generated from `RunConfig` (DomainBed's names and
meaning); `--config FILE` starts from a saved run's `config.json` and the flags given change it."""
from __future__ import annotations

import click

from dgmoe.cli.options import config_from_options, given_settings, run_options
from dgmoe.engine.config import RunConfig
from dgmoe.errors import UsageError


@click.command("train")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Start from this run config (a run's config.json, or a file `dgmoe train --print-config` "
                   "wrote); flags given beside it override its values.")
@click.option("--print-config", is_flag=True, help="Print the run config as JSON and exit without training.")
@run_options()
@click.pass_context
def command(ctx: click.Context, config_file: str | None, print_config: bool, **kw) -> None:
    """Train one run; appends DomainBed records to OUTPUT_DIR/results.jsonl at every checkpoint."""
    base = RunConfig.from_file(config_file) if config_file else None
    cfg = config_from_options(ctx, kw, base)
    if print_config:
        import json

        click.echo(json.dumps(cfg.to_dict(), indent=1))
        return
    if base is None and not given_settings(ctx, kw, only=("output_dir",)):
        raise UsageError("--output-dir is required (the run folder; or --config FILE of a saved run)")
    from dgmoe.engine.precheck import precheck

    precheck(cfg)  # names, ranges, files and the device, before torch is imported
    from dgmoe.engine.trainer import main_log_config, train

    main_log_config()
    result = train(cfg)
    if result.already_done and cfg.execution.progress == "none":  # (otherwise the run log said so)
        click.echo(f"{result.output_dir} is already finished; nothing to do.")

