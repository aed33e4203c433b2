"""Figures for the analysis tools and the HTML report (matplotlib, Agg backend, no display needed).

Every function returns a `matplotlib.figure.Figure`; `png_bytes` / `save_png` turn it into a file or an
embeddable PNG and close it. Figures explain themselves: domains are named (held-out ones marked "(test)")
and keep one colour across figures (`dgmoe.analysis.style.domain_colors`), titles say which model, block and
step they show, every colour that encodes a value has a colour bar or a legend, and user-given text is
drawn literally (`mpl_text`).
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless rendering everywhere
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dgmoe.analysis.style import (  # noqa: E402  (re-exported: callers use plots.expert_colors)
    EXPERT_CMAP,
    block_name,
    domain_colors,
    domain_label,
    expert_colors,
    mpl_text,
    wrap,
)
from dgmoe.atomic import write_bytes_atomic  # noqa: E402

__all__ = ["EXPERT_CMAP", "domain_colors", "expert_colors", "mpl_text"]


def png_bytes(fig: Figure, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def save_png(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    path = Path(path)
    write_bytes_atomic(path, png_bytes(fig, dpi))
    return path


def _as_hwc(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """uint8 `[3, H, W]` (dgmoe's storage format) or `[H, W, 3]` -> `[H, W, 3]` numpy for imshow."""
    arr = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
        arr = arr.transpose(1, 2, 0)
    if arr.shape[-1] == 1:
        arr = arr[..., 0]
    return arr


def _imshow(ax, img: np.ndarray, **kw) -> None:
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, **kw)


# --- synthetic experiment (GMoE App. B.2) -----------------------------------------------------------------

def plot_synthetic_noiseless(results: Sequence) -> Figure:
    """Fig. 4: accuracy per network on val / test 1 / test 2 (mean over seeds, std as error bars)."""
    splits = ("val", "test1", "test2")
    archs = list(dict.fromkeys(r.arch for r in results))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(archs)
    for i, arch in enumerate(archs):
        acc = 100 * np.array([[r.final[s] for s in splits] for r in results if r.arch == arch])
        ax.bar(np.arange(3) + (i - (len(archs) - 1) / 2) * width, acc.mean(0), width, yerr=acc.std(0),
               label=arch.upper(), capsize=3)
    ax.set_xticks(np.arange(3), ["validation", "test 1\n(pixel shifted)", "test 2\n(patch shifted)"])
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    ax.legend()
    ax.set_title("Synthetic experiment (GMoE App. B.2.1)")
    return fig


def plot_synthetic_noisy(results: Sequence) -> Figure:
    """Fig. 5: the MLP's final test-1 and test-2 accuracy over the p1 x p2 grid."""
    p1s = sorted({r.p1 for r in results})
    p2s = sorted({r.p2 for r in results})
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, split in zip(axes, ("test1", "test2")):
        grid = np.zeros((len(p1s), len(p2s)))
        for r in results:
            grid[p1s.index(r.p1), p2s.index(r.p2)] = 100 * r.final[split]
        im = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", origin="lower")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", color="w" if v < 60 else "k", fontsize=8)
        ax.set_xticks(range(len(p2s)), [f"{p:g}" for p in p2s])
        ax.set_yticks(range(len(p1s)), [f"{p:g}" for p in p1s])
        ax.set_xlabel("p2 (patch-level feature)")
        ax.set_title(f"{results[0].arch.upper()} accuracy on {split} (%)")
    axes[0].set_ylabel("p1 (pixel-level feature)")
    fig.colorbar(im, ax=list(axes), shrink=0.8)
    return fig


# --- routing (GMoE Fig. 3c, Figs. 8-13) --------------------------------------------------------------------

def draw_routing_map(ax, image, expert_map: torch.Tensor | np.ndarray, num_experts: int, mode: str = "numbers",
                     parts: np.ndarray | None = None, title: str | None = None, title_color=None) -> None:
    """One image with its patches' top-1 experts: black numbers (Fig. 3c) or coloured cells (Figs. 10-13).

    `parts` (optional) are `[P, 2]` normalised (x, y) part locations, drawn as large circles.
    """
    img = _as_hwc(image)
    h, w = img.shape[:2]
    emap = np.asarray(expert_map.cpu() if isinstance(expert_map, torch.Tensor) else expert_map)
    gh, gw = emap.shape
    _imshow(ax, img, extent=(0, w, h, 0))
    if mode == "colors":
        rgba = expert_colors(num_experts)[emap]
        rgba[..., 3] = 0.45
        ax.imshow(rgba, extent=(0, w, h, 0), interpolation="nearest")
    elif mode == "numbers":
        size = max(4.0, min(12.0, 160.0 / max(gh, gw)))
        for i in range(gh):
            for j in range(gw):
                ax.text((j + 0.5) * w / gw, (i + 0.5) * h / gh, str(int(emap[i, j])), ha="center", va="center",
                        fontsize=size, color="black", fontweight="bold",
                        bbox=dict(boxstyle="square,pad=0.05", fc="white", alpha=0.35, lw=0))
    else:
        raise ValueError(f"routing map mode must be 'numbers' or 'colors', got {mode!r}")
    for k in range(1, gh):
        ax.axhline(k * h / gh, color="white", lw=0.3, alpha=0.6)
    for k in range(1, gw):
        ax.axvline(k * w / gw, color="white", lw=0.3, alpha=0.6)
    if parts is not None:
        for x, y in np.asarray(parts):
            ax.add_patch(plt.Circle((x * w, y * h), 1.5 * w / gw, fill=False, color="red", lw=1.5))
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(mpl_text(title), fontsize=9, color=title_color or "black")


def plot_routing_maps(images: Sequence, maps: Sequence, num_experts: int, titles: Sequence[str] | None = None,
                      mode: str = "numbers", ncols: int = 4, parts: Sequence | None = None,
                      title: str | None = None, title_colors: Sequence | None = None) -> Figure:
    """A grid of routing maps, one panel per (image, map) pair, with a legend of what the marks mean
    (expert colours in 'colors' mode, "number = top-1 expert" in 'numbers' mode). `title` heads the figure
    (say which model, block and step); `title_colors` colour the panel titles (e.g. by domain)."""
    n = len(images)
    ncols = max(1, min(ncols, n))
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3 * ncols, 3 * nrows + 0.8), squeeze=False, layout="constrained")
    for idx, ax in enumerate(axes.flat):
        if idx >= n:
            ax.axis("off")
            continue
        draw_routing_map(ax, images[idx], maps[idx], num_experts, mode,
                         None if parts is None else parts[idx], None if titles is None else titles[idx],
                         None if title_colors is None else title_colors[idx])
    if mode == "colors":
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in expert_colors(num_experts)]
        fig.legend(handles, [f"expert {e}" for e in range(num_experts)], loc="outside lower center",
                   ncol=min(num_experts, 8), fontsize=8, frameon=False, title="top-1 expert per patch",
                   title_fontsize=8)
    else:
        fig.supxlabel(f"number in a patch = its top-1 expert (0-{num_experts - 1})", fontsize=8)
    if title:
        fig.suptitle(mpl_text(wrap(title, 36 * ncols + 8)), fontsize=10)
    return fig


def plot_expert_usage(usage, title: str = "expert usage per domain", domains: Sequence[str] | None = None,
                      test_domains: Sequence[str] = ()) -> Figure:
    """Grouped bars: `usage` is a DataFrame with columns layer, domain, expert, fraction (one panel per layer).

    Bars are coloured by domain (`domains`: the dataset's domain order, which fixes the colours); held-out
    domains are hatched and marked "(test)" in the legend."""
    layers = list(dict.fromkeys(usage["layer"]))
    present = list(dict.fromkeys(usage["domain"]))
    order = list(domains) if domains is not None else present
    colors = domain_colors(order)
    fig, axes = plt.subplots(1, len(layers), figsize=(4.5 * len(layers), 3.4), squeeze=False)
    for ax, layer in zip(axes[0], layers):
        rows = usage[usage["layer"] == layer]
        sub = rows.pivot(index="expert", columns="domain", values="fraction")
        shown = [d for d in order if d in set(rows["domain"])]
        width = 0.8 / max(1, len(shown))
        for i, d in enumerate(shown):
            test = d in test_domains
            ax.bar(sub.index + (i - (len(shown) - 1) / 2) * width, sub[d].to_numpy(), width,
                   label=mpl_text(domain_label(d, test_domains)), color=colors.get(d),
                   hatch="//" if test else None, edgecolor="black" if test else None, linewidth=0.5)
        ax.set_xticks(sub.index, [f"e{e}" for e in sub.index])
        ax.set_xlabel("expert")
        ax.set_ylabel("fraction of patches (top-1)")
        ax.set_title(mpl_text(block_name(layer)), fontsize=9)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.0, 0.9), fontsize=8,
               title="domain", title_fontsize=8, frameon=False)
    fig.suptitle(mpl_text(wrap(title, 40 * len(layers) + 20)), fontsize=10)
    fig.tight_layout()
    return fig


def plot_expert_histogram(matrix: torch.Tensor | np.ndarray, row_labels: Sequence[str], title: str = "",
                          groups: Sequence[tuple[str, int, int]] | None = None, normalize: str = "row") -> Figure:
    """A rows x experts heatmap: parts x experts (Fig. 3b) or attributes x experts (SF-MoE Fig. 5).

    `groups` `(name, start, stop)` label row ranges (attribute categories) instead of every row.
    `normalize` 'row' shows each row as a distribution over experts, 'none' the raw counts.
    """
    m = np.asarray(matrix.cpu() if isinstance(matrix, torch.Tensor) else matrix, dtype=float)
    if normalize == "row":
        m = m / np.clip(m.sum(1, keepdims=True), 1e-12, None)
    elif normalize != "none":
        raise ValueError(f"normalize must be 'row' or 'none', got {normalize!r}")
    rows, experts = m.shape
    n_labels = len(groups) if groups else rows
    fig, ax = plt.subplots(figsize=(3.5 + 0.6 * experts, float(np.clip(0.22 * n_labels + 1.5, 3.0, 14.0))))
    im = ax.imshow(m, aspect="auto", cmap="Blues", interpolation="nearest")
    ax.set_xticks(range(experts), [f"e{e}" for e in range(experts)])
    ax.set_xlabel("selected expert (top-1)")
    if groups:
        ax.set_yticks([(a + b - 1) / 2 for _, a, b in groups], [mpl_text(g) for g, _, _ in groups], fontsize=7)
        for _, a, _ in groups[1:]:
            ax.axhline(a - 0.5, color="grey", lw=0.4)
    else:
        ax.set_yticks(range(rows), [mpl_text(r) for r in row_labels], fontsize=8)
    fig.colorbar(im, ax=ax, shrink=0.7, label="fraction of the row" if normalize == "row" else "count")
    ax.set_title(mpl_text(wrap(title, 60)), fontsize=10)
    return fig


# --- attention (GMoE Figs. 14-17, SF-MoE Fig. 3) -----------------------------------------------------------

ATTENTION_CMAP = "inferno"


def plot_attention_maps(images: Sequence, maps: torch.Tensor | np.ndarray,
                        titles: Sequence[str] | None = None, title: str | None = None,
                        title_colors: Sequence | None = None) -> Figure:
    """Rows = images; columns = the image then each head's CLS-to-patch attention upsampled over it.

    Each map is divided by its own maximum (as DINO-style attention figures scale them), so one colour bar
    (0 to 1 = that map's maximum) reads every panel; the maximum itself is printed in the panel's corner."""
    maps = np.asarray(maps.cpu() if isinstance(maps, torch.Tensor) else maps, dtype=float)  # [B, H, gh, gw]
    b, heads = maps.shape[:2]
    fig, axes = plt.subplots(b, heads + 1, figsize=(2 * (heads + 1) + 1.0, 2 * b + 0.6), squeeze=False,
                             layout="constrained")
    im = None
    for i in range(b):
        img = _as_hwc(images[i])
        h, w = img.shape[:2]
        _imshow(axes[i][0], img)
        axes[i][0].set_title(mpl_text(titles[i]) if titles else "image", fontsize=8,
                             color=(title_colors[i] if title_colors is not None else "black"))
        for k in range(heads):
            ax = axes[i][k + 1]
            peak = float(maps[i, k].max())
            _imshow(ax, img, extent=(0, w, h, 0))
            im = ax.imshow(maps[i, k] / peak if peak > 0 else maps[i, k], extent=(0, w, h, 0), cmap=ATTENTION_CMAP,
                           vmin=0.0, vmax=1.0, alpha=0.65, interpolation="bilinear")
            ax.text(0.03, 0.04, f"max {peak:.3f}", transform=ax.transAxes, fontsize=6, color="white",
                    bbox=dict(boxstyle="square,pad=0.1", fc="black", alpha=0.5, lw=0))
            if i == 0:
                ax.set_title(f"head {k + 1}", fontsize=8)
        for ax in axes[i]:
            ax.set_xticks([])
            ax.set_yticks([])
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=min(0.9, 0.3 + 0.1 * b), label="CLS-to-patch attention / the map's max")
    if title:
        fig.suptitle(mpl_text(wrap(title, 25 * (heads + 1))), fontsize=10)
    return fig


# --- training curves ---------------------------------------------------------------------------------------

def plot_accuracy_curves(records, title: str = "", domains: Sequence[str] | None = None,
                         test_envs: Sequence[int] = (), selected_step: int | None = None) -> Figure:
    """Accuracy per step of one run: `records` a DataFrame (or list of dicts) with `step`, `env{i}_{in,out}_acc`.

    One colour per domain (`domains`, else `env{i}`), solid = its out split (held-out 20%: validation for a
    training domain), dashed = its in split; test domains are drawn thicker and marked "(test)";
    `selected_step` (the checkpoint model selection picked) is a dotted vertical line."""
    import pandas as pd
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    df = df.sort_values("step")
    n_envs = 0
    while f"env{n_envs}_in_acc" in df.columns:
        n_envs += 1
    names = [str(d) for d in domains] if domains is not None and len(domains) == n_envs else \
        [f"env{i}" for i in range(n_envs)]
    test_names = [names[i] for i in test_envs if 0 <= i < n_envs]
    colors = domain_colors(names)
    fig, ax = plt.subplots(figsize=(7.2, 3.4))
    handles = []
    for i, name in enumerate(names):
        test = name in test_names
        for split, style in (("out", "-"), ("in", "--")):
            column = f"env{i}_{split}_acc"
            if column in df.columns:
                ax.plot(df["step"], 100 * df[column], ls=style, color=colors[name], lw=2.4 if test else 1.2,
                        marker="o" if test else None, ms=3)
        handles.append(Line2D([], [], color=colors[name], lw=2.4 if test else 1.2, marker="o" if test else None,
                              label=mpl_text(domain_label(name, test_names))))
    handles += [Line2D([], [], color="grey", ls="-", label="out split (validation)"),
                Line2D([], [], color="grey", ls="--", label="in split (test domain: test acc.)")]
    if selected_step is not None:
        ax.axvline(selected_step, color="black", ls=":", lw=1)
        handles.append(Line2D([], [], color="black", ls=":", label=f"selected step {selected_step}"))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(mpl_text(wrap(title, 80)), fontsize=9)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              ncol=1 if len(handles) <= 14 else 2)
    ax.grid(alpha=0.3)
    return fig
