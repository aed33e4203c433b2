"""The GeoMNIST comparison: MoGE vs ERM vs ERM+LE vs MoGE-SE (and per-region models), several seeds.

Every method trains with `dgmoe.engine.trainer.train` on GeoMNIST (`dgmoe.data.geo.geomnist`) with the same
small ViT (28 px, patch 7, width 64, depth 6, 2 heads; MoGE blocks at the last-two positions 2 and 4) and
the same optimiser settings. Test numbers are read from the run's checkpoint records:

- model selection: the checkpoint with the best *validation worst-region accuracy* (minimum over the
  training regions' held-out 20%), ties to the earliest (`dgmoe.selection.worst_group_checkpoint`, the
  rule of `WorstGroupSelection` for runs without WILDS metrics);
- test accuracy of region r = accuracy on the whole test domain '<r>/test';
- worst-region accuracy = minimum over the six regions' test domains (held-out region included);
- overall accuracy = accuracy pooled over all test domains; held-out accuracy = the held-out region's;
  worst seen-region accuracy = minimum over the test domains of the training regions.

MoGE-SE (§2.2 (i)) takes the MoGE run's last weights, switches every MoGE block to its shared expert and
fits a new linear head on the training regions' training items; it is evaluated on the same test domains.
Per-region models: one ERM model per training region (trained on that region only); a region's test domain
is predicted by its own model, a held-out region by the model of the nearest training-region centre.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dgmoe.data.geo.geomnist import GEO_REGIONS, REGION_NAMES, geo_domains
from dgmoe.document import Cell, Table
from dgmoe.errors import UsageError
from dgmoe.experiments.config import GeoBenchConfig
from dgmoe.selection import worst_group_checkpoint

# method -> (model, algorithm, extra model kwargs)
METHODS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "ERM": ("vit_tiny_patch16_224", "ERM", {}),
    "ERM+LE": ("vit_le_tiny_patch16_224", "ERM", {}),
    "MoGE": ("moge_tiny_patch16_224", "MoGE", {}),
    # ablation: SatCLIP's training dropout (p = 0.5) inside the location encoder's SIREN (dgmoe's default: 0)
    "MoGE-drop0.5": ("moge_tiny_patch16_224", "MoGE", {"location_encoder_kwargs": {"dropout": 0.5}}),
}
DERIVED = ("MoGE-SE", "PerRegion")


def _register() -> None:
    import dgmoe.algorithms.moge  # noqa: F401
    import dgmoe.models.erm_le  # noqa: F401
    import dgmoe.models.moge  # noqa: F401


def train_config(method: str, seed: int, settings: GeoBenchConfig, output_root: str | Path,
                 test_envs: Sequence[int] | None = None, tag: str | None = None):
    from dgmoe.engine.config import RunConfig

    model, algorithm, extra = METHODS[method]
    _, default_test = geo_domains(settings.held_out)
    return RunConfig.from_flat(
        dataset="GeoMNIST", data_dir=settings.data_dir, test_envs=tuple(test_envs or default_test), model=model,
        algorithm=algorithm, output_dir=str(Path(output_root) / f"{tag or method}_seed{seed}"),
        steps=settings.steps, checkpoint_freq=settings.checkpoint_freq, trial_seed=seed, seed=seed,
        hparams={"lr": settings.lr, "batch_size": settings.batch_size, "drop_path_rate": 0.0},
        patch_size=settings.patch_size,
        model_kwargs={"embed_dim": settings.embed_dim, "depth": settings.depth, "num_heads": settings.num_heads,
                      **extra},
        num_threads=settings.num_threads, progress="none")


def test_accuracies(record: dict[str, Any], sizes_in: Sequence[int], sizes_out: Sequence[int],
                    envs: Sequence[int]) -> dict[int, tuple[float, int]]:
    """{env: (accuracy over the whole domain, size)} from a record's in/out accuracies."""
    out = {}
    for i in envs:
        n_in, n_out = sizes_in[i], sizes_out[i]
        acc = (record[f"env{i}_in_acc"] * n_in + record[f"env{i}_out_acc"] * n_out) / (n_in + n_out)
        out[i] = (acc, n_in + n_out)
    return out


def select_record(records: list[dict[str, Any]], train_envs: Sequence[int], which: str = "val_worst") -> dict:
    """The last record, or (`val_worst`) worst-group validation over the training regions' held-out parts
    (`dgmoe.selection.worst_group_checkpoint`; records are in step order, so ties go to the earliest step)."""
    if which == "last":
        return records[-1]
    best = worst_group_checkpoint(records, [f"env{i}_out_acc" for i in train_envs])
    if best is None:
        raise ValueError("no records to select from")
    return records[best]


def summarize(per_region: dict[str, float], sizes: dict[str, int], held_out: Sequence[str], val_worst: float,
              step: int) -> dict[str, float]:
    total = sum(sizes.values())
    seen = [a for r, a in per_region.items() if r not in held_out]
    return {"worst_region_acc": min(per_region.values()), "seen_worst_region_acc": min(seen),
            "overall_acc": sum(per_region[r] * sizes[r] for r in per_region) / total,
            "held_out_acc": float(np.mean([per_region[r] for r in held_out])) if held_out else math.nan,
            "val_worst_region_acc": val_worst, "step": step,
            **{f"acc:{r}": a for r, a in per_region.items()}}


def summarize_run(run_dir: str | Path, held_out: Sequence[str], which: str = "val_worst") -> dict[str, float]:
    """Selected checkpoint's test metrics of a GeoMNIST run (see module docstring)."""
    from dgmoe.engine.checkpoint import read_run_config
    from dgmoe.engine.io import read_jsonl

    config = read_run_config(run_dir)
    records = read_jsonl(Path(run_dir) / "results.jsonl")
    splits = config["splits"]
    domains = config["dataset"]["domains"]
    record = select_record(records, splits["train_envs"], which)
    test = test_accuracies(record, splits["in"], splits["out"], splits["test_envs"])
    per_region = {domains[i][:-5]: a for i, (a, _) in test.items()}
    sizes = {domains[i][:-5]: n for i, (_, n) in test.items()}
    val_worst = min(record[f"env{i}_out_acc"] for i in splits["train_envs"])
    return summarize(per_region, sizes, held_out, val_worst, record["step"])


def moge_se_summary(run_dir: str | Path, settings: GeoBenchConfig, seed: int) -> dict[str, float]:
    """MoGE-SE from a finished MoGE run (last weights): shared expert only + a new linear head."""
    from dgmoe.data import domain_splits, get_dataset, get_transforms
    from dgmoe.engine.checkpoint import load_run, saved_run
    from dgmoe.metrics import accuracy
    from dgmoe.models.moge_fallbacks import fit_shared_expert_head

    network, config = load_run(run_dir, "last")
    run = saved_run(config)
    dataset = get_dataset("GeoMNIST", settings.data_dir, n_per_domain=run.data.n_per_domain)
    splits = domain_splits(dataset, run.data.holdout_fraction, run.seeds.trial_seed)
    train_envs, test_envs = config["splits"]["train_envs"], config["splits"]["test_envs"]
    _, eval_tf = get_transforms("GeoMNIST", dataset.input_shape[-1], False)
    fit_shared_expert_head(network, [dataset[i] for i in train_envs], [splits[i][0] for i in train_envs], eval_tf,
                           dataset.num_classes, seed=seed)
    from dgmoe.models.moge_fallbacks import collect_features

    def acc_of(envs, idx):
        feats, labels = collect_features(network, envs, idx, eval_tf)
        return accuracy(labels, network.head(feats)), len(labels)

    per_region, sizes = {}, {}
    for i in test_envs:
        per_region[dataset.domains[i][:-5]], sizes[dataset.domains[i][:-5]] = acc_of([dataset[i]], [None])
    val_worst = min(acc_of([dataset[i]], [splits[i][1]])[0] for i in train_envs)
    return summarize(per_region, sizes, settings.held_out, val_worst, config["n_steps"] - 1)


def nearest_training_region(region: str, training: Sequence[str]) -> str:
    centre = {r.name: r for r in GEO_REGIONS}

    def angle(a, b):
        la1, lo1, la2, lo2 = map(math.radians, (a.lat, a.lon, b.lat, b.lon))
        c = math.sin(la1) * math.sin(la2) + math.cos(la1) * math.cos(la2) * math.cos(lo1 - lo2)
        return math.acos(max(-1.0, min(1.0, c)))

    return min(training, key=lambda t: angle(centre[region], centre[t]))


def per_region_summary(seed: int, settings: GeoBenchConfig, output_root: str | Path,
                       which: str = "val_worst") -> dict[str, float]:
    """One ERM model per training region; each test region is predicted by its own (or nearest) model."""
    from dgmoe.engine.checkpoint import read_run_config
    from dgmoe.engine.trainer import train

    domains, _ = geo_domains(settings.held_out)
    training = [d for d in domains if not d.endswith("/test")]
    runs = {}
    for r_idx, region in enumerate(training):
        test_envs = [i for i in range(len(domains)) if i != r_idx]
        runs[region] = train(train_config("ERM", seed, settings, output_root, test_envs,
                                          f"PerRegion-{region}")).output_dir
    per_region = {}
    for region in REGION_NAMES:
        owner = region if region in training else nearest_training_region(region, training)
        per_region[region] = summarize_run(runs[owner], settings.held_out, which)[f"acc:{region}"]
    config = read_run_config(runs[training[0]])
    sizes = {d[:-5]: n for d, n in zip(config["dataset"]["domains"], config["dataset"]["sizes"]) if d.endswith("/test")}
    return summarize(per_region, sizes, settings.held_out, math.nan, -1)


def run_geo_benchmark(output_root: str | Path, methods: Sequence[str] = ("ERM", "ERM+LE", "MoGE", "MoGE-SE"),
                      seeds: Sequence[int] = (0, 1, 2), settings: GeoBenchConfig = GeoBenchConfig(),
                      which: str = "val_worst", log=print) -> list[dict[str, Any]]:
    """Train (or reuse finished) runs and return one summary row per (method, seed)."""
    unknown = [m for m in methods if m not in METHODS and m not in DERIVED]
    if unknown:
        raise UsageError(f"unknown methods {unknown}; valid: {', '.join([*METHODS, *DERIVED])}")
    from dgmoe.engine.trainer import train

    _register()
    rows = []
    for seed in seeds:
        for method in methods:
            if method == "PerRegion":
                summary = per_region_summary(seed, settings, output_root, which)
            elif method == "MoGE-SE":
                moge_dir = train(train_config("MoGE", seed, settings, output_root)).output_dir
                summary = moge_se_summary(moge_dir, settings, seed)
            else:
                summary = summarize_run(train(train_config(method, seed, settings, output_root)).output_dir,
                                        settings.held_out, which)
            row = {"method": method, "seed": seed, **summary}
            log(f"{method} seed {seed}: worst-region {summary['worst_region_acc']:.3f} overall "
                f"{summary['overall_acc']:.3f} held-out {summary['held_out_acc']:.3f}")
            rows.append(row)
    return rows


def results_table(rows: list[dict[str, Any]]) -> Table:
    """An untitled table: mean ± std (ddof 1, carried as `Cell.sd`) over seeds of worst-region, overall and
    held-out accuracy (in %)."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    table = []
    for m in methods:
        sub = [r for r in rows if r["method"] == m]

        def fmt(key):
            v = np.array([r[key] for r in sub], dtype=np.float64) * 100
            return Cell(mean=float(v.mean()), sd=float(v.std(ddof=1)) if len(v) > 1 else 0.0)

        table.append([m, fmt("worst_region_acc"), fmt("overall_acc"), fmt("held_out_acc"),
                      fmt("seen_worst_region_acc"), len(sub)])
    return Table.make("", ["method", "worst-region acc (%)", "overall acc (%)", "held-out region acc (%)",
                           "worst seen-region acc (%)", "seeds"], table)


def run_sentinel_check(data_dir: str, output_root: str | Path, steps: int = 201, seed: int = 0,
                       methods: Sequence[str] = ("ERM", "ERM+LE", "MoGE"), log=print) -> list[dict[str, Any]]:
    """The real-coordinate path end to end on the Sentinel-2 sample (`dgmoe.data.geo.sentinel`): train on the
    west and central sectors, test on the east one; MoGE's routing map is saved as a PNG."""
    from dgmoe.analysis.geo import analyze_run
    from dgmoe.data.geo.sentinel import LON_SECTORS
    from dgmoe.engine.config import RunConfig
    from dgmoe.engine.trainer import train

    _register()
    import dgmoe.data.geo.sentinel  # noqa: F401  (registers the dataset)

    rows = []
    for method in methods:
        model, algorithm, extra = METHODS[method]
        cfg = RunConfig.from_flat(dataset="Sentinel2Sample", data_dir=data_dir, test_envs=(2,), model=model,
                          algorithm=algorithm, output_dir=str(Path(output_root) / f"sentinel_{method}_seed{seed}"),
                          steps=steps, checkpoint_freq=50, trial_seed=seed, seed=seed, img_size=32, patch_size=8,
                          hparams={"lr": 1e-3, "batch_size": 16, "drop_path_rate": 0.0},
                          model_kwargs={"embed_dim": 64, "depth": 4, "num_heads": 2, **extra}, num_threads=1,
                          progress="none")
        result = train(cfg)
        last = result.records[-1]
        row: dict[str, Any] = {
            "method": method, "seed": seed, "steps": steps,
            **{f"acc:{s}": (last[f"env{i}_in_acc"], last[f"env{i}_out_acc"]) for i, s in enumerate(LON_SECTORS)}}
        if method == "MoGE":
            row["figures"] = {k: str(v) for k, v in analyze_run(result.output_dir, Path(output_root) / "figures",
                                                                data_dir=data_dir).items()}
        log(f"Sentinel2Sample {method}: " + ", ".join(f"{s} in/out {row[f'acc:{s}'][0]:.2f}/{row[f'acc:{s}'][1]:.2f}"
                                                      for s in LON_SECTORS))
        rows.append(row)
    return rows
