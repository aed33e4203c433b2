"""`dgmoe algorithms`: list the DG algorithms; `dgmoe algorithms bench`: their training cost table."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from dgmoe.bench.config import AlgorithmBenchConfig, BenchmarkConfig
from dgmoe.cli.config import AlgorithmsListConfig
from dgmoe.cli.options import ListFlagsGroup, build_config, config_options
from dgmoe.document import Table


def algorithm_rows() -> list[tuple[str, int, str, str]]:
    """(name, minimum training domains, description, reference) for every registered algorithm."""
    from dgmoe.algorithms import get_algorithm, list_algorithms

    rows = []
    for name in list_algorithms():
        cls = get_algorithm(name)
        rows.append((name, cls.MIN_TRAIN_DOMAINS, cls.DESCRIPTION, cls.REFERENCE))
    return rows


@click.group("algorithms", cls=ListFlagsGroup, invoke_without_command=True)
@config_options(AlgorithmsListConfig)
@click.pass_context
def command(ctx: click.Context, **kw: Any) -> None:
    """List the registered DG algorithms with a one-line description and the paper they implement."""
    if ctx.invoked_subcommand is not None:
        return
    references = build_config(AlgorithmsListConfig, ctx, kw).references
    for name, min_domains, description, reference in algorithm_rows():
        need = f" [needs >= {min_domains} training domains]" if min_domains > 1 else ""
        click.echo(f"{name:9s} {description}{need}")
        if references:
            click.echo(f"{'':9s}   {reference}")


@command.command("bench")
@config_options(AlgorithmBenchConfig)
@click.pass_context
def bench(ctx: click.Context, **kw: Any) -> None:
    """Training step time and peak memory per algorithm relative to ERM (GMoE Table 16's form)."""
    from dgmoe.algorithms import list_algorithms
    from dgmoe.bench.algorithms import benchmark_algorithms, cost_table, cost_warnings

    cfg = build_config(AlgorithmBenchConfig, ctx, kw)
    algorithms, img_size, patch_size, domains, threads, device = (cfg.algorithms, cfg.img_size, cfg.patch_size,
                                                                  cfg.domains, cfg.threads, cfg.device)
    names = (tuple(list_algorithms()) if algorithms.strip() == "all"
             else tuple(a.strip() for a in algorithms.split(",") if a.strip()))
    if "ERM" in names:  # the reference row first
        names = ("ERM", *(n for n in names if n != "ERM"))
    for backbone in cfg.backbones:
        config = BenchmarkConfig(backbone, names, steps=cfg.steps, warmup=cfg.warmup, domains=domains,
                                 batch_per_domain=cfg.batch_per_domain, img_size=img_size, patch_size=patch_size,
                                 threads=threads, device=device, group_size=cfg.group_size)
        results = benchmark_algorithms(config)
        title = (f"{backbone} at {img_size} px / patch {patch_size}, batch {domains} x {cfg.batch_per_domain}, "
                 f"{threads} thread(s), {device}")
        click.echo(cost_table_text(cost_table(results, title)))
        for line in cost_warnings(results):
            click.echo(f"WARNING: {line}")
        click.echo("")


def cost_table_text(table: Table) -> str:
    """The cost table as the command prints it: its title in bold, the table, then its notes (the algorithms
    not measured) one a line."""
    notes = [n.markdown() for n in table.notes]
    return "\n".join([f"**{table.title}**", "", replace(table, notes=()).markdown(title=False),
                      *([""] + notes if notes else [])])


if __name__ == "__main__":  # `python -m dgmoe.cli.algorithms` runs the same command as `dgmoe algorithms`
    command()
