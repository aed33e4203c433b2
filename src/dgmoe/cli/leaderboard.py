"""`dgmoe leaderboard RUNS_DIR --out DIR`: WILDS leaderboard prediction files and summaries."""
from __future__ import annotations

from pathlib import Path

import click

from dgmoe.errors import UsageError


@click.command("leaderboard")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder of the export: one sub-folder per method row, with its prediction files and summary.")
@click.option("--selection", type=click.Choice(["worst", "worst-id", "wilds"]), default="worst", show_default=True,
              help="Checkpoint selection: worst-group accuracy on the OOD validation split (WILDS' default split), on "
              "id_val (worst-id, WILDS' named alternative), or WILDS' official metric per dataset on the OOD split "
              "(wilds: iWildCam's macro-F1, Camelyon17's accuracy; FMoW's worst-region accuracy as worst).")
@click.option("--device", default="cpu", show_default=True, help="torch device of the predictions.")
@click.option("--data-dir", default=None, help="Dataset root (default: each run's own --data-dir).")
def command(runs_dir: Path, out_dir: Path, selection: str, device: str, data_dir: str | None) -> None:
    """Write, for the WILDS runs under RUNS_DIR, the files a WILDS leaderboard submission asks for: per method,
    seed and evaluation split `{dataset}_split:{split}_seed:{seed}_epoch:best_pred.csv` (one predicted label per
    line, in the split's order), and summary.json / summary.md with the official metrics per seed and over seeds.

    The checkpoint of each seed is the one the selection picks; its weights must have been kept (train with
    --save-model-every-checkpoint)."""
    from dgmoe.report.collect import load_records
    from dgmoe.report.leaderboard import export
    from dgmoe.selection import get_selection

    records = load_records(runs_dir)
    if records.empty:
        raise UsageError(f"no records: no finished run with a results.jsonl under {runs_dir}")
    method = get_selection(selection)
    paths = export(records, out_dir, method, device, data_dir,  # type: ignore[arg-type]
                   echo=lambda s: click.echo(s, err=True))
    for path in paths:
        click.echo(f"wrote {path.parent}")
