"""`dgmoe algorithms`: list the DG algorithms; `dgmoe algorithms bench`: their training cost table."""
from __future__ import annotations

import click

from dgmoe.bench.algorithms import BenchmarkConfig
from dgmoe.bench.timing import MIN_ROUNDS, MIN_WARMUP
from dgmoe.cli.options import ListFlagsGroup


def algorithm_rows() -> list[tuple[str, int, str, str]]:
    """(name, minimum training domains, description, reference) for every registered algorithm."""
    from dgmoe.algorithms import get_algorithm, list_algorithms

    rows = []
    for name in list_algorithms():
        cls = get_algorithm(name)
        rows.append((name, cls.MIN_TRAIN_DOMAINS, cls.DESCRIPTION, cls.REFERENCE))
    return rows


@click.group("algorithms", cls=ListFlagsGroup, invoke_without_command=True)
@click.option("--references/--no-references", default=True, help="Print each algorithm's paper reference.")
@click.pass_context
def command(ctx: click.Context, references: bool) -> None:
    """List the registered DG algorithms with a one-line description and the paper they implement."""
    if ctx.invoked_subcommand is not None:
        return
    for name, min_domains, description, reference in algorithm_rows():
        need = f" [needs >= {min_domains} training domains]" if min_domains > 1 else ""
        click.echo(f"{name:9s} {description}{need}")
        if references:
            click.echo(f"{'':9s}   {reference}")


@command.command("bench")
@click.option("--backbone", "backbones", multiple=True, default=("vit_tiny_patch16_224", "gmoe_tiny_patch16_224"),
              show_default=True, help="Registered model name; repeat for several tables.")
@click.option("--algorithms", default="all", show_default=True,
              help="Comma-separated algorithm names (must include ERM), or 'all': every registered algorithm (those "
                   "that cannot train the backbone are listed with the reason).")
@click.option("--steps", default=6, show_default=True, type=click.IntRange(min=MIN_ROUNDS),
              help=f"Timed steps per algorithm (at least {MIN_ROUNDS}; an even number averages DANN's alternation).")
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(min=MIN_WARMUP),
              help="Untimed warm-up steps per algorithm.")
@click.option("--domains", default=3, show_default=True)
@click.option("--batch-per-domain", default=16, show_default=True)
@click.option("--img-size", default=32, show_default=True)
@click.option("--patch-size", default=4, show_default=True)
@click.option("--threads", default=1, show_default=True, help="torch threads per worker process.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--group-size", default=BenchmarkConfig.group_size, show_default=True, type=click.IntRange(min=2),
              help="Worker processes alive at once (ERM's included); each holds a backbone, so this bounds memory.")
def bench(backbones: tuple[str, ...], algorithms: str, steps: int, warmup: int, domains: int,
          batch_per_domain: int, img_size: int, patch_size: int, threads: int, device: str, group_size: int) -> None:
    """Training step time and peak memory per algorithm relative to ERM (GMoE Table 16's form)."""
    from dgmoe.algorithms import list_algorithms
    from dgmoe.bench.algorithms import benchmark_algorithms, cost_table_markdown, cost_warnings

    names = (tuple(list_algorithms()) if algorithms.strip() == "all"
             else tuple(a.strip() for a in algorithms.split(",") if a.strip()))
    if "ERM" in names:  # the reference row first
        names = ("ERM", *(n for n in names if n != "ERM"))
    for backbone in backbones:
        config = BenchmarkConfig(backbone, names, steps=steps, warmup=warmup, domains=domains,
                                 batch_per_domain=batch_per_domain, img_size=img_size, patch_size=patch_size,
                                 threads=threads, device=device, group_size=group_size)
        results = benchmark_algorithms(config)
        title = (f"{backbone} at {img_size} px / patch {patch_size}, batch {domains} x {batch_per_domain}, "
                 f"{threads} thread(s), {device}")
        click.echo(cost_table_markdown(results, title))
        for line in cost_warnings(results):
            click.echo(f"WARNING: {line}")
        click.echo("")


if __name__ == "__main__":  # `python -m dgmoe.cli.algorithms` runs the same command as `dgmoe algorithms`
    command()
