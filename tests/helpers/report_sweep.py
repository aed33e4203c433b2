"""A synthetic sweep for the report tests: run folders with the records `dgmoe report` reads, no training.

`make_sweep(root)` writes, per run, `results.jsonl` (DomainBed records: `env{i}_{in,out}_acc`, `step`,
`step_time`, `mem_gb`, `hparams`, `args`), `config.json` (the `model_build` the parameter count rebuilds)
and `done`: PACS-style runs (2 algorithms x 2 models x 4 test domains, plus the leave-one-domain-out pair
runs of one of them), two GeoMNIST runs with six test domains and a geo figure, an unfinished run, and a
run whose folder, dataset and domain names matplotlib would read as maths (26 runs). `make_runs(root, n)`
writes n PACS-style runs.
"""
from __future__ import annotations

import json
import random
from itertools import combinations, product
from pathlib import Path

PACS = ("art_painting", "cartoon", "photo", "sketch")
GEO = tuple(f"{r}{s}" for s in ("", "/test") for r in ("NorthAmerica", "CentralAmerica", "SouthAmerica", "Europe",
                                                        "Africa", "Asia") if not (s == "" and r == "CentralAmerica"))
MODELS = ("vit_tiny_patch16_224", "gmoe_tiny_patch16_224")
ALGORITHMS = ("ERM", "CORAL")
WEIRD = "lr$\\frac$x <b>&"  # mathtext for matplotlib, markup for HTML


def write_run(folder: Path, dataset: str, domains: tuple[str, ...], algorithm: str, model: str,
              test_envs: list[int], trial_seed: int = 0, hparams_seed: int = 0, steps: int = 300, every: int = 50,
              done: bool = True, model_kwargs: dict | None = None) -> Path:
    """One run folder with a record every `every` steps (accuracies drawn from a seeded generator)."""
    rng = random.Random(f"{folder.name}{algorithm}{model}{test_envs}{trial_seed}{hparams_seed}")
    folder.mkdir(parents=True, exist_ok=True)
    args = {"dataset": dataset, "algorithm": algorithm, "model": model, "test_envs": test_envs,
            "trial_seed": trial_seed, "hparams_seed": hparams_seed, "seed": trial_seed, "domains": list(domains),
            "steps": steps, "output_dir": str(folder), "model_kwargs": model_kwargs or {}}
    hparams = {"lr": 5e-5, "batch_size": 32, "weight_decay": 0.0}
    lines = []
    for step in range(0, steps + 1, every):
        progress = step / steps
        record = {"step": step, "epoch": progress * 3, "loss": 2.0 * (1 - progress) + rng.random() * 0.1,
                  "step_time": 0.4 + 0.05 * rng.random(), "mem_gb": 1.5 + 0.1 * rng.random()}
        for i in range(len(domains)):
            base = 0.3 + 0.5 * progress * (0.7 if i in test_envs else 1.0)
            record[f"env{i}_in_acc"] = min(1.0, base + 0.05 * rng.random())
            record[f"env{i}_out_acc"] = min(1.0, base + 0.05 * rng.random())
        lines.append(json.dumps({**record, "hparams": hparams, "args": args}))
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    build = {"name": model, "kwargs": {"num_classes": 7, "img_size": 32, "patch_size": 4, **(model_kwargs or {})}}
    (folder / "config.json").write_text(json.dumps({"config": {**args, "model": model}, "model_build": build,
                                                    "dataset": {"name": dataset, "domains": list(domains)},
                                                    "splits": {"test_envs": test_envs}}))
    if done:
        (folder / "done").write_text("done\n")
    return folder


def make_runs(root: Path, n: int) -> list[Path]:
    """`n` PACS-style runs: algorithms x models x test domains x trial seeds, as a real sweep lays them out."""
    out = []
    for k, (trial, alg, model, env) in enumerate(product(range(n), ALGORITHMS, MODELS, range(len(PACS)))):
        if k == n:
            break
        out.append(write_run(root / f"{alg}_{model}_env{env}_trial{trial}_{k:04x}", "PACS", PACS, alg, model, [env],
                             trial_seed=trial))
    return out


def make_sweep(root: Path) -> dict[str, Path]:
    """The mixed sweep described in the module docstring; returns a few of its folders by role."""
    from dgmoe.analysis.geo import save_routing_frequency

    make_runs(root / "pacs", 16)
    weird = write_run(root / "odd" / WEIRD, "Odd$set$", ("x$\\frac$y", "plain", "z"), "ERM", MODELS[0], [0])
    pairs = [write_run(root / "pacs" / f"loo_{a}{b}", "PACS", PACS, "ERM", MODELS[1], [a, b])
             for a, b in combinations(range(len(PACS)), 2)]
    geo = {}
    for method, model in (("MoGE", "moge_tiny_patch16_224"), ("ERM", "vit_tiny_patch16_224")):
        geo[method] = write_run(root / "geo" / f"{method}_seed0", "GeoMNIST", GEO, method, model,
                                list(range(5, len(GEO))), model_kwargs={"embed_dim": 64, "depth": 6, "num_heads": 2})
    (root / "geo" / "figures").mkdir()
    save_routing_frequency(__import__("numpy").array([0.5, 0.3, 0.2]),
                           root / "geo" / "figures" / "MoGE_seed0_routing_frequency.png", "Routing frequency")
    unfinished = write_run(root / "pacs" / "still_training", "PACS", PACS, "ERM", MODELS[0], [2], trial_seed=1,
                           done=False)
    return {"weird": weird, "pair": pairs[0], "moge": geo["MoGE"], "unfinished": unfinished}
