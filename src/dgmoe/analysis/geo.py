"""MoGE routing analysis (App. A, Fig. 1e, Fig. 3): what the experts discovered.

- `collect_routing`: per image, the routing weights of every MoGE block, with coordinates, labels and
  predictions;
- `routing_frequency`: how often each expert is an image's top-1 expert (Fig. 3 bottom);
- `forced_expert_accuracy`: rows = discovered domain (images whose top-1 expert is d under normal
  routing), columns = forced expert k (every image through specialist k with alpha = 1 in all MoGE blocks,
  the shared expert still on); entry = accuracy (Fig. 3 top);
- `save_routing_map` / `save_forced_matrix` / `save_routing_frequency`: PNG figures (coordinates coloured
  by top expert, Fig. 1e).
The discovered domain is taken from the last MoGE block unless `layer` says otherwise.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset

from dgmoe.atomic import write_bytes_atomic
from dgmoe.data.loaders import eval_loader
from dgmoe.moe.auxiliary import sparse_layers
from dgmoe.moe.layer import MoEMlp, routing_mode
from dgmoe.moe.record import record_routing


@dataclass
class RoutingTable:
    gates: list[np.ndarray]    # per MoGE block [N, E]
    lat: np.ndarray
    lon: np.ndarray
    labels: np.ndarray
    predictions: np.ndarray
    region: np.ndarray | None

    def top_expert(self, layer: int = -1) -> np.ndarray:
        return self.gates[layer].argmax(axis=1)


def _moge_layers(network: nn.Module) -> dict[str, MoEMlp]:
    layers = {n: m for n, m in sparse_layers(network).items() if m.config.routing == "image"}
    if not layers:
        raise ValueError(f"routing analysis needs a MoGE network, got {type(network).__name__}")
    return layers


@torch.no_grad()
def collect_routing(network: nn.Module, environments: Sequence[Dataset], transform,
                    indices: Sequence[np.ndarray | None] | None = None, batch_size: int = 128,
                    device: str = "cpu") -> RoutingTable:
    layers = _moge_layers(network)
    network.eval()
    lat, lon, ys, preds, regions = [], [], [], [], []
    indices = indices if indices is not None else [None] * len(environments)
    with record_routing(network) as recorded:
        for env, idx in zip(environments, indices):
            for batch in eval_loader(env, idx, transform, batch_size):
                batch = batch.to(device)
                logits = network(batch.x, batch.meta)
                meta = batch.meta or {}
                lat.append(meta.get("lat", torch.full((len(batch.y),), float("nan"))).cpu())
                lon.append(meta.get("lon", torch.full((len(batch.y),), float("nan"))).cpu())
                if "region" in meta:
                    regions.append(meta["region"].cpu())
                ys.append(batch.y.cpu())
                preds.append(logits.argmax(1).cpu())
    gates = []  # per layer [n_images, E]: alpha, zero outside each image's top-K
    for name, layer in layers.items():
        rec = recorded[name]
        dense = torch.zeros(len(rec.expert_ids), layer.config.num_experts).scatter(1, rec.expert_ids, rec.gates)
        gates.append(dense.numpy())
    return RoutingTable(gates, torch.cat(lat).numpy(), torch.cat(lon).numpy(), torch.cat(ys).numpy(),
                        torch.cat(preds).numpy(), torch.cat(regions).numpy() if regions else None)


def routing_frequency(top_expert: np.ndarray, num_experts: int) -> np.ndarray:
    """Fraction of images whose top-1 expert is k, for k = 0..E-1."""
    counts = np.bincount(top_expert, minlength=num_experts).astype(np.float64)
    return counts / max(counts.sum(), 1.0)


@torch.no_grad()
def forced_expert_accuracy(network: nn.Module, environments: Sequence[Dataset], transform,
                           indices: Sequence[np.ndarray | None] | None = None, layer: int = -1,
                           batch_size: int = 128, device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """(matrix [E, E] of accuracies with NaN for empty domains, domain sizes [E]); see module docstring."""
    num_experts = next(iter(_moge_layers(network).values())).config.num_experts
    table = collect_routing(network, environments, transform, indices, batch_size, device)
    domain = table.top_expert(layer)
    matrix = np.full((num_experts, num_experts), np.nan)
    for k in range(num_experts):
        with routing_mode(network, "forced", expert=k):
            forced = collect_routing(network, environments, transform, indices, batch_size, device)
        correct = forced.predictions == forced.labels
        for d in range(num_experts):
            mask = domain == d
            if mask.any():
                matrix[d, k] = correct[mask].mean()
    return matrix, np.bincount(domain, minlength=num_experts)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _write_figure(fig, path: str | Path) -> None:
    """Write a figure as the PNG file `path` (through dgmoe's atomic writer) and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    _pyplot().close(fig)
    write_bytes_atomic(path, buffer.getvalue())


def _expert_cmap(num_experts: int):
    """Expert e in colour e of tab10, as in every dgmoe routing figure (`dgmoe.analysis.style.expert_colors`)."""
    from matplotlib.colors import ListedColormap

    from dgmoe.analysis.style import expert_colors

    return ListedColormap(expert_colors(max(num_experts, 1)))


def save_routing_map(table: RoutingTable, path: str | Path, layer: int = -1, title: str = "") -> Path:
    """Coordinates coloured by their top-1 expert (the discovered domains, Fig. 1e)."""
    plt = _pyplot()
    top = table.top_expert(layer)
    num_experts = table.gates[layer].shape[1]
    from dgmoe.analysis.style import mpl_text, wrap

    fig, ax = plt.subplots(figsize=(8, 4.2))
    sc = ax.scatter(table.lon, table.lat, c=top, cmap=_expert_cmap(num_experts), vmin=-0.5,
                    vmax=num_experts - 0.5, s=6)
    fig.colorbar(sc, ax=ax, ticks=range(num_experts), label="top-1 expert (discovered domain)")
    ax.set(xlabel="longitude (degrees)", ylabel="latitude (degrees)")
    ax.set_title(mpl_text(wrap(title or "discovered domains (top-1 expert)", 90)), fontsize=10)
    finite = np.isfinite(table.lon) & np.isfinite(table.lat)
    if finite.any():  # zoom to the data with a margin, within the globe
        lon, lat = table.lon[finite], table.lat[finite]
        pad = max(5.0, 0.1 * max(np.ptp(lon), np.ptp(lat)))
        ax.set_xlim(max(-180.0, lon.min() - pad), min(180.0, lon.max() + pad))
        ax.set_ylim(max(-90.0, lat.min() - pad), min(90.0, lat.max() + pad))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _write_figure(fig, path)
    return Path(path)


def save_forced_matrix(matrix: np.ndarray, sizes: np.ndarray, path: str | Path, title: str = "") -> Path:
    """Rows = discovered domain (with its size), columns = forced expert, colour = accuracy (colour bar)."""
    from dgmoe.analysis.style import mpl_text, wrap

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4.5))
    im = ax.imshow(np.nan_to_num(matrix, nan=0.0), vmin=0, vmax=1, cmap="viridis")
    for d in range(matrix.shape[0]):
        for k in range(matrix.shape[1]):
            if not np.isnan(matrix[d, k]):
                ax.text(k, d, f"{matrix[d, k]:.2f}", ha="center", va="center", fontsize=7, color="w")
    ax.set_yticks(range(matrix.shape[0]), [f"{d} (n={n})" for d, n in enumerate(sizes)])
    ax.set_xticks(range(matrix.shape[1]))
    ax.set(xlabel="forced expert", ylabel="discovered domain (top-1 expert)")
    ax.set_title(mpl_text(wrap(title or "forced-expert accuracy", 50)), fontsize=8)
    fig.colorbar(im, ax=ax, label="accuracy")
    fig.tight_layout()
    _write_figure(fig, path)
    return Path(path)


def save_routing_frequency(freq: np.ndarray, path: str | Path, title: str = "") -> Path:
    """Bars: the share of images whose top-1 expert is e (expert colours as in the routing map)."""
    from dgmoe.analysis.style import expert_colors, mpl_text, wrap

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(range(len(freq)), freq, color=expert_colors(len(freq)))
    ax.set_xticks(range(len(freq)))
    ax.set(xlabel="expert", ylabel="fraction of images (top-1)")
    ax.set_title(mpl_text(wrap(title or "routing frequency", 55)), fontsize=8)
    fig.tight_layout()
    _write_figure(fig, path)
    return Path(path)


def analyze_run(run_dir: str | Path, output_dir: str | Path, which: str = "last", data_dir: str | None = None,
                envs: Sequence[int] | None = None, layer: int = -1) -> dict[str, Path]:
    """Routing frequency, forced-expert matrix and routing map of a finished MoGE run, as PNGs.

    Uses every domain of the run's dataset (or `envs`), all items, with the run's evaluation transform.
    """
    from dgmoe.analysis.style import checkpoint_text
    from dgmoe.data import get_dataset, get_transforms
    from dgmoe.engine.checkpoint import checkpoint_step, load_run, saved_run, weights_file

    network, config = load_run(run_dir, which)
    weights, which = weights_file(run_dir, which)
    run = saved_run(config)
    dataset = get_dataset(run.data.dataset, data_dir or run.execution.data_dir, run.data.img_size,
                          n_per_domain=run.data.n_per_domain)
    _, eval_tf = get_transforms(run.data.dataset, dataset.input_shape[-1], False)
    chosen = [dataset[i] for i in (envs if envs is not None else range(len(dataset)))]
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = collect_routing(network, chosen, eval_tf)
    num_experts = table.gates[layer].shape[1]
    freq = routing_frequency(table.top_expert(layer), num_experts)
    matrix, sizes = forced_expert_accuracy(network, chosen, eval_tf, layer=layer)
    name = Path(run_dir).name
    block = f"MoGE block {layer % len(table.gates) + 1} of {len(table.gates)}"
    what = f"{name}: {checkpoint_text(config['model_build']['name'], checkpoint_step(weights), which)}, {block}"
    paths = {"routing_map": save_routing_map(table, out / f"{name}_routing_map.png", layer,
                                             f"Discovered domains (top-1 expert) on the map, {what}"),
             "routing_frequency": save_routing_frequency(freq, out / f"{name}_routing_frequency.png",
                                                         f"Routing frequency, {what}"),
             "forced_matrix": save_forced_matrix(matrix, sizes, out / f"{name}_forced_experts.png",
                                                 f"Forced-expert accuracy, {what}")}
    buffer = io.BytesIO()
    np.savez(buffer, frequency=freq, forced_matrix=matrix, domain_sizes=sizes, lat=table.lat, lon=table.lon,
             top_expert=table.top_expert(layer))
    write_bytes_atomic(out / f"{name}_routing.npz", buffer.getvalue())
    return paths
