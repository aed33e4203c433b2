"""From a trained run folder to analysis files: routing maps, expert usage, attention maps, CUB-DG histograms.

Each `analyze_*` function writes PNG figures and Markdown tables into `out_dir` (by default
`<run>/analysis/`, which `dgmoe report` embeds) and returns the Markdown it wrote.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sized, cast

import torch
import torch.nn as nn

from dgmoe.analysis import plots
from dgmoe.analysis.attention import attention_weights, cls_attention_maps, head_redundancy
from dgmoe.analysis.patches import (
    attribute_expert_matrix,
    attribute_groups,
    boxes_background_mask,
    part_expert_histogram,
    sum_by_group,
)
from dgmoe.analysis.routing import RoutingMaps, grid_size_of, routing_maps, usage_summary, usage_table
from dgmoe.analysis.style import block_name, checkpoint_text, domain_colors, domain_label
from dgmoe.atomic import atomic_folder, remove_stale_folders, write_text_atomic
from dgmoe.document import Block, Cell, Document, Heading, Table
from dgmoe.engine.runtree import walk_run_folders
from dgmoe.models.info import describe_model
from dgmoe.tables import csv_text


@dataclass
class RunImages:
    """A trained network and a few uint8 images per domain, with their normalised model inputs."""

    model: nn.Module
    config: dict[str, Any]
    images: dict[str, torch.Tensor]   # domain -> uint8 [n, C, H, W]
    inputs: dict[str, torch.Tensor]   # domain -> float [n, C, H, W]
    step: int | None = None           # the training step of the loaded weights, when recorded
    which: str | None = None          # "best" or "last"

    @property
    def domains(self) -> list[str]:
        """Every domain of the run's dataset, in the dataset's order (which fixes the domains' colours)."""
        return list(self.config.get("dataset", {}).get("domains") or self.images)

    @property
    def test_domains(self) -> list[str]:
        """The run's held-out domains, by name."""
        envs = self.config.get("splits", {}).get("test_envs") or []
        return [self.domains[i] for i in envs if 0 <= i < len(self.domains)]

    def describe(self) -> str:
        """`gmoe_tiny_patch16_224, step 2 (best checkpoint)`: which network the figures show."""
        model = self.config.get("model_build", {}).get("name") or type(self.model).__name__
        return checkpoint_text(model, self.step, self.which)

    def panel(self, domain: str, i: int) -> str:
        """A panel title: `photo (test) #0`."""
        return f"{domain_label(domain, self.test_domains)} #{i}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def model_img_size(model: nn.Module) -> int:
    size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if size is None:
        raise ValueError(f"{type(model).__name__} has no patch_embed.img_size")
    return int(size[0] if isinstance(size, (tuple, list)) else size)


def eval_inputs(dataset: str, images: torch.Tensor, img_size: int) -> torch.Tensor:
    """The run's evaluation transform (DomainBed's resize + normalisation) applied to uint8 images."""
    from dgmoe.data import get_transforms

    return get_transforms(dataset, img_size, False)[1](images)


def load_run_images(run_dir: str | Path, n_per_domain: int = 16, data_dir: str | Path | None = None,
                    which: str = "best", seed: int = 0) -> RunImages:
    """Load a run's network and a seeded sample of `n_per_domain` images of every domain of its dataset."""
    from dgmoe.data import get_dataset
    from dgmoe.engine.checkpoint import checkpoint_step, load_run, saved_run, weights_file

    model, config = load_run(run_dir, which=which)
    weights, which = weights_file(run_dir, which)
    cfg = saved_run(config)
    name = cfg.data.dataset
    data_dir = data_dir if data_dir is not None else cfg.execution.data_dir
    size = model_img_size(model)
    ds = get_dataset(name, data_dir, size, n_per_domain=n_per_domain, seed=seed)
    images, inputs = {}, {}
    for domain, env in zip(ds.domains, ds.environments):
        idx = list(range(min(n_per_domain, len(cast(Sized, env)))))
        x = env.gather(idx)[0] if hasattr(env, "gather") else torch.stack([env[i][0] for i in idx])
        images[domain] = x
        inputs[domain] = eval_inputs(name, x, size)
    return RunImages(model, config, images, inputs, checkpoint_step(weights), which)


def analyze_routing(run: RunImages, out_dir: str | Path, show: int = 4, mode: str = "numbers") -> str:
    """Per MoE layer, a figure of top-1 routing maps (`show` images per domain) and expert usage per domain."""
    out = Path(out_dir)
    per_domain: dict[str, RoutingMaps] = {d: routing_maps(run.model, x) for d, x in run.inputs.items()}
    first = next(iter(per_domain.values()))
    colors = domain_colors(run.domains)
    for layer in first.layers:
        imgs, maps, titles, title_colors = [], [], [], []
        for d, rm in per_domain.items():
            n = min(show, len(rm.experts[layer]))
            imgs += list(run.images[d][:n])
            maps += list(rm.experts[layer][:n])
            titles += [run.panel(d, i) for i in range(n)]
            title_colors += [colors.get(d, "black")] * n
        fig = plots.plot_routing_maps(imgs, maps, first.num_experts[layer], titles, mode=mode, ncols=max(1, show),
                                      title=f"Top-1 expert per patch, {block_name(layer)}: {run.describe()}",
                                      title_colors=title_colors)
        plots.save_png(fig, out / f"routing_{_safe(layer)}.png")
    table = usage_table(per_domain)
    plots.save_png(plots.plot_expert_usage(table, f"Expert usage per domain (share of patches, top-1): "
                                                  f"{run.describe()}", run.domains, run.test_domains),
                   out / "expert_usage.png")
    write_text_atomic(out / "expert_usage.csv", csv_text(list(table.columns), table.itertuples(index=False, name=None)))
    n_img = ", ".join(f"{d} {len(x)}" for d, x in run.inputs.items())  # (no Python repr in a report)
    text = Document((usage_summary(table, f"Expert usage per domain (% of patches, top-1; images per domain: "
                                          f"{n_img})"),)).markdown()
    write_text_atomic(out / "expert_usage.md", text)
    return text


def analyze_attention(run: RunImages, out_dir: str | Path, show: int = 2, block: int = -1) -> str:
    """Last-block CLS attention per head (GMoE Figs. 14-17) and the head-redundancy score per domain."""
    out = Path(out_dir)
    grid = grid_size_of(run.model)
    prefix = int(getattr(run.model, "num_prefix_tokens", 1))
    rows: list[list[object]] = []
    shown_imgs, shown_maps, titles, title_colors = [], [], [], []
    colors = domain_colors(run.domains)
    for d, x in run.inputs.items():
        maps = cls_attention_maps(attention_weights(run.model, x, block), grid, prefix)
        rows.append([d, len(x), Cell(mean=head_redundancy(maps, "cosine"), decimals=3),
                     Cell(mean=head_redundancy(maps, "js"), decimals=3)])
        n = min(show, len(x))
        shown_imgs += list(run.images[d][:n])
        shown_maps.append(maps[:n])
        titles += [run.panel(d, i) for i in range(n)]
        title_colors += [colors.get(d, "black")] * n
    index = block % (len(getattr(run.model, "blocks", [])) or 1)
    fig = plots.plot_attention_maps(shown_imgs, torch.cat(shown_maps), titles, title_colors=title_colors,
                                    title=f"CLS attention per head, block {index}: {run.describe()}")
    plots.save_png(fig, out / "attention_maps.png")
    text = Document((Table.make(f"Head redundancy of block {index} (mean pairwise similarity of the heads' CLS "
                                "attention; 1 = identical heads)",
                                ["domain", "images", "redundancy (cosine)", "redundancy (1 - JS)"], rows),)).markdown()
    write_text_atomic(out / "head_redundancy.md", text)
    return text


def analyze_cub(model: nn.Module, cub_data_dir: str | Path, out_dir: str | Path, domain: str = "Natural",
                split: str = "train", n_images: int = 64, show: int = 4, k: int = 9) -> str:
    """GMoE Fig. 3b/3c and SF-MoE Fig. 5 on CUB-DG: part x expert histograms (each part's `k` nearest
    patches, background = outside the bounding box), attribute x expert matrices, maps with the parts."""
    from dgmoe.data.cub import CUBDG

    out = Path(out_dir)
    cub = CUBDG(cub_data_dir)
    if domain not in cub.domains:
        raise ValueError(f"domain {domain!r} is not in {cub.root} (found {', '.join(cub.domains)})")
    size = model_img_size(model)
    rows = cub.rows(split)[:n_images]
    ds = cub.dataset(size, split)
    env = ds.environments[cub.domains.index(domain)]
    images = torch.stack([env[i][0] for i in range(len(rows))])
    rm = routing_maps(model, eval_inputs("CUBDG", images, size))
    parts_xy, visible = cub.normalized_parts(rows)
    background = boxes_background_mask(cub.normalized_boxes(rows), rm.grid_size)
    ann = cub.annotations
    text: list[Block] = [Heading(f"CUB-DG {domain}, {split} split, {len(rows)} images: part x expert counts (each "
                                 f"part's {k} nearest patches; background = patches outside the bounding box)", 3)]
    for layer in rm.layers:
        e = rm.num_experts[layer]
        hist = part_expert_histogram(rm.experts[layer], parts_xy, visible, e, k, background)
        labels = [*ann.part_names, "background"]
        fig = plots.plot_expert_histogram(hist, labels, f"parts x experts, {layer}")
        plots.save_png(fig, out / f"cub_parts_{_safe(layer)}.png")
        experts = [f"e{i}" for i in range(e)]
        text += [Heading(layer, 4), Table.make("", ["part", *experts],
                                               [[lab, *(int(v) for v in row)] for lab, row in zip(labels, hist)])]
        if ann.attributes is not None:
            attrs = ann.attributes[torch.as_tensor(rows)]
            mat = attribute_expert_matrix(rm.experts[layer], attrs, e)
            groups = attribute_groups(list(ann.attribute_names))
            fig = plots.plot_expert_histogram(mat, ann.attribute_names, f"attributes x experts, {layer}", groups)
            plots.save_png(fig, out / f"cub_attributes_{_safe(layer)}.png")
            by_cat = sum_by_group(mat, groups)
            by_cat = by_cat / by_cat.sum(1, keepdim=True).clamp_min(1e-12)
            shares = [[g, *(Cell(mean=float(100 * v)) for v in row)] for (g, _, _), row in zip(groups, by_cat)]
            text.append(Table.make("", ["attribute category", *experts], shares))
        n = min(show, len(rows))
        vis_parts = [parts_xy[i][visible[i]] for i in range(n)]
        fig = plots.plot_routing_maps(list(images[:n]), list(rm.experts[layer][:n]), e,
                                      [f"image id {ann.image_ids[r]}" for r in rows[:n]], parts=vis_parts)
        plots.save_png(fig, out / f"cub_routing_{_safe(layer)}.png")
    if len(cub.domains) > 1:  # GMoE Figs. 10-13: the same images in every domain
        n = min(show, len(rows))
        per_dom = {}
        for d in cub.domains:
            env_d = ds.environments[cub.domains.index(d)]
            imgs_d = torch.stack([env_d[i][0] for i in range(n)])
            per_dom[d] = (imgs_d, routing_maps(model, eval_inputs("CUBDG", imgs_d, size)))
        for layer in rm.layers:
            imgs, maps, titles = [], [], []
            for i in range(n):
                for d, (imgs_d, rm_d) in per_dom.items():
                    imgs.append(imgs_d[i])
                    maps.append(rm_d.experts[layer][i])
                    titles.append(f"{d}, image id {ann.image_ids[rows[i]]}")
            fig = plots.plot_routing_maps(imgs, maps, rm.num_experts[layer], titles, mode="colors",
                                          ncols=len(per_dom))
            plots.save_png(fig, out / f"cub_domains_{_safe(layer)}.png")
    md = Document(tuple(text)).markdown()
    write_text_atomic(out / "cub_experts.md", md)
    return md


@dataclass(frozen=True)
class AnalysisOutcome:
    """What `analyze_runs` did with one run folder: `analysed`, `skipped` (already analysed) or `failed`."""

    run: Path
    status: str
    reason: str = ""


def is_moge_run(config: dict[str, Any]) -> bool:
    """A MoGE (metadata-routed) run: analysed by `dgmoe.analysis.geo`, not by the patch-routing tools. Read
    from the run's `ModelInfo` (config.json `model_info`: image routing on metadata), never from its name;
    for a run written before config.json held it, from a description of its model build."""
    info = config.get("model_info")
    if info is None:
        build = config.get("model_build", {})
        try:
            kwargs = {k: v for k, v in (build.get("kwargs") or {}).items() if k not in ("pretrained",)}
            info = describe_model(build["name"], **kwargs).to_dict()
        except Exception:  # an unknown or unbuildable model: not one the geo analysis can read
            return False
    sparse = info.get("sparse") or {}
    return bool(info.get("uses_metadata")) and sparse.get("routing") == "image"


def analyze_one(run: Path, n_images: int = 8, show: int = 3) -> Path:
    """Write `<run>/analysis/`: MoGE runs get the geo routing analysis (routing map, frequency, forced-expert
    matrix), MoE runs routing maps and expert usage, every ViT run attention maps; raises on any problem.

    The folder is written whole (`dgmoe.atomic.atomic_folder`), so a failed or killed analysis leaves no
    `analysis/` folder behind (that would read as "already analysed"); the next one removes what a killed one
    left."""
    from dgmoe.analysis.routing import num_experts_of
    from dgmoe.engine.checkpoint import read_run_config

    config = read_run_config(run)
    final = run / "analysis"
    remove_stale_folders(run)
    with atomic_folder(final) as partial:
        if is_moge_run(config):
            import dgmoe.data.geo.sentinel  # noqa: F401  (registers Sentinel2Sample)
            from dgmoe.analysis.geo import analyze_run

            analyze_run(run, partial, which="best")
        else:
            images = load_run_images(run, n_images)
            if num_experts_of(images.model):
                analyze_routing(images, partial, show)
            analyze_attention(images, partial, min(show, 2))
    return final


def analyze_runs(runs_dir: str | Path, n_images: int = 8, show: int = 3, redo: bool = False,
                 log=None) -> list[AnalysisOutcome]:
    """Routing (MoE runs), geo routing (MoGE runs) and attention analysis of every run under `runs_dir`
    that has none yet (`redo` recomputes), into each `<run>/analysis/`.

    Returns one outcome per run folder (any folder with a `results.jsonl`): a run that is unfinished, has no
    `config.json` or weights, or whose analysis raises is `failed` with the reason, and the others still run;
    `log(outcome)` is called as each one is known."""
    outcomes = []
    for run in walk_run_folders(runs_dir, "results.jsonl").found:  # through links, each folder once
        if (run / "analysis").is_dir() and not redo:
            outcome = AnalysisOutcome(run, "skipped", "already has analysis/ (pass redo to recompute)")
        elif not (run / "done").exists():
            outcome = AnalysisOutcome(run, "failed", "not finished (no 'done' file): its weights are not final")
        elif not (run / "config.json").is_file():
            outcome = AnalysisOutcome(run, "failed", "no config.json: not a dgmoe run folder, the network "
                                                     "cannot be rebuilt")
        else:
            try:
                analyze_one(run, n_images, show)
                outcome = AnalysisOutcome(run, "analysed")
            except Exception as err:  # one broken run must not stop the others; its reason is reported
                outcome = AnalysisOutcome(run, "failed", f"{type(err).__name__}: {err}".strip().splitlines()[0])
        if log is not None:
            log(outcome)
        outcomes.append(outcome)
    return outcomes
