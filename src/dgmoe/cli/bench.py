"""`dgmoe bench`: cost benchmarks printed as ratios measured in one run."""
from __future__ import annotations

import click


def _print_table(rows: list[dict]) -> None:
    import pandas as pd

    click.echo(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"))


@click.group("bench")
def command() -> None:
    """Cost benchmarks (MoE layer vs its limit; whole models vs a reference)."""


@command.command("layer")
@click.option("--tokens", type=int, default=32 * 197, show_default=True)
@click.option("--dim", type=int, default=384, show_default=True)
@click.option("--experts", type=int, default=6, show_default=True)
@click.option("--top-k", type=int, default=2, show_default=True)
@click.option("--router", type=click.Choice(["cosine", "linear"]), default="cosine", show_default=True)
@click.option("--rounds", type=int, default=7, show_default=True)
@click.option("--threads", type=int, default=None)
def layer(**kw) -> None:
    """MoE layer forward+backward vs the limit (k dense FFNs over all tokens)."""
    import platform

    import torch

    from dgmoe.bench.layer import LayerBenchConfig, bench_moe_layer
    from dgmoe.bench.timing import tune_malloc

    tune_malloc()
    cfg = LayerBenchConfig(**kw)
    result = bench_moe_layer(cfg)
    click.echo(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    rows = [{"path": k, "seconds": v, "ratio to limit": result[f"{k} / limit"]} for k, v in result.items()
            if not k.endswith("/ limit")]
    _print_table(rows)


@command.command("models")
@click.option("--models", default=None, help="Comma list; the first is the reference.")
@click.option("--img-size", type=int, default=224, show_default=True)
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--rounds", type=int, default=5, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--compile", "compile_", is_flag=True, help="torch.compile every model.")
@click.option("--threads", type=int, default=None)
def models(models, img_size, batch_size, rounds, device, precision, compile_, threads) -> None:
    """Train step, inference time, peak memory, params and FLOPs of several models, as ratios."""
    from dgmoe.bench.models import DEFAULT_MODELS, ModelBenchConfig, bench_models

    names = tuple(models.split(",")) if models else DEFAULT_MODELS
    _print_table(bench_models(ModelBenchConfig(names, img_size, batch_size, rounds=rounds, device=device,
                                               precision=precision, compile=compile_, threads=threads)))
