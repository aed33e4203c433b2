"""The synthetic experiment behind Theorem 1 (GMoE App. B.2): architecture alignment decides which feature
an ERM-trained network uses, and so on which distribution shift it fails.

Data (App. B.2.1): `x = (x^(1), ..., x^(P))`, each patch in R^K, label y uniform in {0..K-1}.

- *Pixel-level feature*: in the first patch, pixel y is 1 and the other K-1 pixels are N(0, 1).
- *Patch-level feature*: one patch, chosen uniformly among patches 2..P, equals `c_y`, where `c_1..c_K` are
  K mutually orthogonal unit vectors of R^K (a seeded random orthogonal matrix).
- Every other patch is N(0, I_K).

Test set 1 sets pixel `(y+1) mod K` of the first patch instead (the pixel-level feature becomes spurious);
test set 2 uses the patch `c_{(y+1) mod K}` (the patch-level feature becomes spurious). The validation set
follows the training distribution. The noisy version (App. B.2.2) replaces y by a uniformly drawn y' != y
in the pixel-level feature with probability 1-p1 and in the patch-level feature with probability 1-p2; the
test sets stay noiseless (only the one shifted feature differs from training).

Networks (App. B.2.1): an MLP 40-100-100-4 (ReLU) on the flattened input, and a 2-layer fully
convolutional network over the patch axis: a 1x1 convolution with 20 filters, ReLU, a 1x1 convolution to K
channels, and a global pool over patches (max by default, `fcn_pool="mean"` as an option). The paper does
not give the optimiser: we train with Adam (lr 3e-3, batch 256) and cross-entropy for `epochs` epochs.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.atomic import write_text_atomic
from dgmoe.document import Block, Cell, Document, Heading, Table, Text
from dgmoe.engine.progress import Mode, Progress
from dgmoe.experiments.config import SyntheticConfig
from dgmoe.seeding import seed_hash

Arch = Literal["mlp", "fcn"]
SPLITS = ("val", "test1", "test2")
DEFAULT_GRID = (0.7, 0.85, 1.0)
FULL_GRID = (0.6, 0.7, 0.8, 0.9, 1.0)


def orthonormal_features(k: int, generator: torch.Generator) -> torch.Tensor:
    """K mutually orthogonal unit vectors of R^K as the rows of a `[K, K]` matrix (QR of a Gaussian)."""
    q, r = torch.linalg.qr(torch.randn(k, k, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))  # Haar-distributed, unique
    return q.T.contiguous().float()


def _noisy_labels(y: torch.Tensor, p: float, k: int, generator: torch.Generator) -> torch.Tensor:
    """y with probability p, otherwise a uniformly drawn y' != y."""
    flip = torch.rand(y.shape, generator=generator) >= p
    other = (y + torch.randint(1, k, y.shape, generator=generator)) % k
    return torch.where(flip, other, y)


def generate(n: int, features: torch.Tensor, n_patches: int, generator: torch.Generator, p1: float = 1.0,
             p2: float = 1.0, pixel_shift: int = 0, patch_shift: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` samples `(x [n, P, K], y [n])` of App. B.2; a shift s uses class (y+s) mod K for that feature."""
    k = features.shape[0]
    y = torch.randint(0, k, (n,), generator=generator)
    x = torch.randn(n, n_patches, k, generator=generator)
    rows = torch.arange(n)
    pixel_class = (_noisy_labels(y, p1, k, generator) + pixel_shift) % k
    x[rows, 0, pixel_class] = 1.0
    patch_class = (_noisy_labels(y, p2, k, generator) + patch_shift) % k
    position = torch.randint(1, n_patches, (n,), generator=generator)
    x[rows, position] = features[patch_class]
    return x, y


def make_datasets(cfg: SyntheticConfig, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Train/val (training distribution, noise p1/p2) and the two noiseless OOD test sets, all seeded."""
    gen = torch.Generator().manual_seed(seed_hash("synthetic", "features", seed))
    c = orthonormal_features(cfg.n_classes, gen)

    def draw(name: str, n: int, **kw) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed_hash("synthetic", name, seed, cfg.p1, cfg.p2))
        return generate(n, c, cfg.n_patches, g, **kw)

    return {
        "train": draw("train", cfg.n_train, p1=cfg.p1, p2=cfg.p2),
        "val": draw("val", cfg.n_val, p1=cfg.p1, p2=cfg.p2),
        "test1": draw("test1", cfg.n_test, pixel_shift=1),
        "test2": draw("test2", cfg.n_test, patch_shift=1),
    }


class PatchMLP(nn.Module):
    """MLP on the flattened patches: P*K -> hidden... -> K with ReLU (App. B.2: 40-100-100-4)."""

    def __init__(self, n_patches: int, n_classes: int, hidden: tuple[int, ...]):
        super().__init__()
        dims = (n_patches * n_classes, *hidden)
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PatchFCN(nn.Module):
    """Two 1x1 convolutions over the patch axis (shared weights for every patch) and a global pool."""

    def __init__(self, n_classes: int, filters: int, pool: Literal["max", "mean"] = "max"):
        super().__init__()
        self.conv1 = nn.Conv1d(n_classes, filters, kernel_size=1)
        self.conv2 = nn.Conv1d(filters, n_classes, kernel_size=1)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv2(F.relu(self.conv1(x.transpose(1, 2))))  # [B, K, P]
        return h.amax(dim=-1) if self.pool == "max" else h.mean(dim=-1)


def build_network(arch: Arch, cfg: SyntheticConfig) -> nn.Module:
    if arch == "mlp":
        return PatchMLP(cfg.n_patches, cfg.n_classes, cfg.mlp_hidden)
    if arch == "fcn":
        return PatchFCN(cfg.n_classes, cfg.fcn_filters, cfg.fcn_pool)
    raise ValueError(f"unknown synthetic architecture {arch!r}; expected 'mlp' or 'fcn'")


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    acc = (model(x).argmax(dim=1) == y).float().mean().item()
    model.train()
    return acc


@dataclass
class TrainResult:
    """Accuracies of one trained network: `history[e][split]` after epoch e+1, `final` after the last."""

    arch: str
    seed: int
    p1: float
    p2: float
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def final(self) -> dict[str, float]:
        return self.history[-1]


def steps_per_network(cfg: SyntheticConfig) -> int:
    """Optimiser steps one `train_network` takes: `epochs` passes over `n_train` in batches."""
    return cfg.epochs * math.ceil(cfg.n_train / cfg.batch_size)


def train_network(arch: Arch, cfg: SyntheticConfig, seed: int,
                  data: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
                  progress: Progress | None = None) -> TrainResult:
    """ERM (cross-entropy, Adam) on the training set; evaluates val/test1/test2 after every epoch.
    `progress` is advanced by one per optimiser step (`steps_per_network` in all)."""
    data = data if data is not None else make_datasets(cfg, seed)
    name = f"{arch.upper()} seed {seed}" + ("" if cfg.p1 == cfg.p2 == 1.0 else f" p1={cfg.p1:g} p2={cfg.p2:g}")
    torch.manual_seed(seed_hash("synthetic", arch, "init", seed))
    model = build_network(arch, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    shuffle = torch.Generator().manual_seed(seed_hash("synthetic", arch, "shuffle", seed))
    x_tr, y_tr = data["train"]
    result = TrainResult(arch, seed, cfg.p1, cfg.p2)
    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        if progress is not None:
            progress.describe(f"{name}, epoch {epoch + 1}/{cfg.epochs}")
        perm = torch.randperm(len(y_tr), generator=shuffle)
        for i in range(0, len(perm), cfg.batch_size):
            idx = perm[i:i + cfg.batch_size]
            loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if progress is not None:
                progress.update(1)
        result.history.append({s: accuracy(model, *data[s]) for s in SPLITS})
    result.seconds = time.perf_counter() - start
    return result


def run_noiseless(cfg: SyntheticConfig, seeds: tuple[int, ...] = (0, 1, 2),
                  archs: tuple[Arch, ...] = ("mlp", "fcn"), progress: Progress | None = None) -> list[TrainResult]:
    """App. B.2.1 / Fig. 4: every architecture on the same seeded data, per seed (`len(seeds) * len(archs)`
    networks, each advancing `progress` by `steps_per_network`)."""
    cfg = replace(cfg, p1=1.0, p2=1.0)
    out = []
    for seed in seeds:
        data = make_datasets(cfg, seed)
        out += [train_network(a, cfg, seed, data, progress) for a in archs]
    return out


def run_noisy(cfg: SyntheticConfig, grid: tuple[float, ...] = DEFAULT_GRID, seed: int = 0,
              arch: Arch = "mlp", progress: Progress | None = None) -> list[TrainResult]:
    """App. B.2.2 / Fig. 5: one network per (p1, p2) in grid x grid (`len(grid) ** 2` networks)."""
    return [train_network(arch, replace(cfg, p1=p1, p2=p2), seed, progress=progress) for p1 in grid for p2 in grid]


def _pct(values: list[float]) -> Cell:
    """Mean ± std (ddof 0) in %; the mean alone for one value."""
    arr = 100 * np.asarray(values)
    return Cell(mean=float(arr.mean()), sd=float(arr.std()) if len(arr) > 1 else None)


def noiseless_table(results: list[TrainResult]) -> Table:
    """An untitled table: accuracy (%) per architecture and split, mean ± std over seeds (ddof 0)."""
    rows = []
    for arch in dict.fromkeys(r.arch for r in results):
        rs = [r for r in results if r.arch == arch]
        rows.append([arch.upper(), *(_pct([r.final[s] for r in rs]) for s in SPLITS), len(rs)])
    return Table.make("", ["network", "val", "test 1 (pixel feature shifted)", "test 2 (patch feature shifted)",
                           "seeds"], rows)


def per_seed_table(results: list[TrainResult]) -> Table:
    """An untitled table: every run's final accuracy (%), one row per (network, seed)."""
    rows = [[r.arch.upper(), r.seed, *(Cell(mean=100 * r.final[s]) for s in SPLITS), Cell(mean=r.seconds)]
            for r in results]
    return Table.make("", ["network", "seed", "val", "test 1", "test 2", "train time (s)"], rows)


def noisy_table(results: list[TrainResult], epoch: int | None = None) -> Table:
    """An untitled grid: rows p1, columns p2, cells 'test1 / test2' accuracy (%) after `epoch` (default last)."""
    p1s = sorted({r.p1 for r in results})
    p2s = sorted({r.p2 for r in results})
    lookup = {(r.p1, r.p2): (r.history[-1] if epoch is None else r.history[epoch - 1]) for r in results}
    rows = [[f"{p1:g}", *(f"{100 * lookup[p1, p2]['test1']:.1f} / {100 * lookup[p1, p2]['test2']:.1f}"
                          for p2 in p2s)] for p1 in p1s]
    return Table.make("", ["p1 \\ p2", *(f"{p:g}" for p in p2s)], rows)


def results_to_json(results: list[TrainResult], cfg: SyntheticConfig) -> dict:
    return {"config": asdict(cfg), "runs": [asdict(r) for r in results]}


def synthetic_document(clean: list[TrainResult], noisy: list[TrainResult], seeds: tuple[int, ...],
                       epochs: int) -> Document:
    """The report: the noiseless tables (over `seeds`), then the noisy grid after the first and the last epoch
    (none without `noisy`)."""
    blocks: list[Block] = [
        Heading("Noiseless (App. B.2.1, Fig. 4): accuracy %, mean ± std over seeds " + ",".join(map(str, seeds)), 2),
        noiseless_table(clean), Text("Per seed:"), per_seed_table(clean)]
    if noisy:
        what = "MLP test 1 / test 2 accuracy % after epoch"
        blocks += [Heading(f"Noisy (App. B.2.2, Fig. 5): {what} 1 (seed {seeds[0]})", 2), noisy_table(noisy, epoch=1),
                   Heading(f"Noisy: {what} {epochs}", 2), noisy_table(noisy)]
    return Document(tuple(blocks))


def run_and_report(out_dir: str | Path, cfg: SyntheticConfig, seeds: tuple[int, ...] = (0, 1, 2),
                   grid: tuple[float, ...] = DEFAULT_GRID, progress_mode: Mode = "auto") -> str:
    """Run App. B.2 (the noiseless experiment over `seeds`, then the noisy `grid` unless empty) and write
    `synthetic.md`, `synthetic.json` and the PNG figures into `out_dir`, showing progress (`progress_mode`:
    auto, bar, lines or none); returns the Markdown report."""
    from dgmoe.analysis.plots import plot_synthetic_noiseless, plot_synthetic_noisy, save_png

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    networks = 2 * len(seeds) + len(grid) ** 2
    with Progress(networks * steps_per_network(cfg), mode=progress_mode, unit="step") as progress:
        progress.write(f"synthetic: {networks} networks x {steps_per_network(cfg)} steps "
                       f"({cfg.epochs} epochs of {cfg.n_train} samples)")
        clean = run_noiseless(cfg, seeds, progress=progress)
        noisy = run_noisy(cfg, grid, seed=seeds[0], progress=progress) if grid else []
    report = synthetic_document(clean, noisy, seeds, cfg.epochs).markdown()
    save_png(plot_synthetic_noiseless(clean), out_dir / "synthetic_noiseless.png")
    payload = {"noiseless": results_to_json(clean, cfg)}
    if grid:
        save_png(plot_synthetic_noisy(noisy), out_dir / "synthetic_noisy.png")
        payload["noisy"] = results_to_json(noisy, cfg)
    write_text_atomic(out_dir / "synthetic.md", report)
    write_text_atomic(out_dir / "synthetic.json", json.dumps(payload, indent=1))
    return report
