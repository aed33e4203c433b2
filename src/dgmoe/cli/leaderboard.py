"""`dgmoe leaderboard RUNS_DIR --out DIR`: WILDS leaderboard prediction files and summaries."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dgmoe.cli.options import build_config, config_options
from dgmoe.errors import UsageError
from dgmoe.posthoc.config import LeaderboardConfig


@click.command("leaderboard")
@config_options(LeaderboardConfig)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """Write, for the WILDS runs under RUNS_DIR, the files a WILDS leaderboard submission asks for: per method,
    seed and evaluation split `{dataset}_split:{split}_seed:{seed}_epoch:best_pred.csv` with WILDS' own dataset and
    split names, in DIR/<WILDS name>/<method>/ (one predicted label per
    line, in the split's order), and summary.json / summary.md with the official metrics per seed and over seeds.

    The checkpoint of each seed is the one the selection picks; its weights must have been kept (train with
    --save-model-every-checkpoint)."""
    from dgmoe.posthoc.leaderboard import export
    from dgmoe.report.collect import load_records
    from dgmoe.selection import get_selection

    cfg = build_config(LeaderboardConfig, ctx, kw)
    runs_dir, out_dir, selection, device, data_dir = (Path(cfg.runs_dir), Path(cfg.out_dir), cfg.selection,
                                                      cfg.device, cfg.data_dir)
    existing = next(p for p in (out_dir, *out_dir.absolute().parents) if p.exists())
    if not existing.is_dir():  # refused before any prediction is computed
        raise UsageError(f"--out {out_dir} is not a folder ({existing} is a file); give a folder for the "
                         "leaderboard's files")
    records = load_records(runs_dir)
    if records.empty:
        raise UsageError(f"no records: no finished run with a results.jsonl under {runs_dir}")
    method = get_selection(selection)
    paths = export(records, out_dir, method, device, data_dir,  # type: ignore[arg-type]
                   echo=lambda s: click.echo(s, err=True))
    for path in paths:
        click.echo(f"wrote {path.parent}")
