"""The offline main job: a small ViT vs a small GMoE on RotatedMNIST from the bundled MNIST digits.

Both runs leave a domain out, are normal run folders (results.jsonl, config.json, weights, done) and
are reported side by side: in-domain accuracy (the held-out 20% of the training domains) and
out-of-domain accuracy (the left-out domain), each at the checkpoint chosen by training-domain validation.
"""
from __future__ import annotations

import time
from pathlib import Path

from dgmoe.engine.config import RunConfig
from dgmoe.engine.trainer import train

QUICKSTART_MODELS = ("vit_micro_patch7_28", "gmoe_micro_patch7_28")


def quickstart(output_dir: str | Path = "runs/quickstart", dataset: str = "RotatedMNIST", test_env: int = 0,
               steps: int = 300, checkpoint_freq: int = 50, seed: int = 0, models=QUICKSTART_MODELS,
               num_threads: int | None = None) -> list[dict]:
    """Train each model once and return one summary row per model."""
    rows = []
    for model in models:
        cfg = RunConfig.from_flat(dataset=dataset, test_envs=(test_env,), model=model, algorithm="ERM",
                          output_dir=str(Path(output_dir) / model), steps=steps, checkpoint_freq=checkpoint_freq,
                          seed=seed, num_threads=num_threads, progress="lines")
        start = time.perf_counter()
        result = train(cfg)
        rows.append(summarize(result.records, test_env, model, time.perf_counter() - start))
    return rows


def summarize(records: list[dict], test_env: int, model: str, seconds: float) -> dict:
    n = len(records[0]["args"]["domains"])
    train_envs = [i for i in range(n) if i != test_env]

    def val(r):
        return sum(r[f"env{i}_out_acc"] for i in train_envs) / len(train_envs)

    best = max(records, key=val)
    return {"model": model, "selected step": best["step"], "in-domain acc": val(best),
            "out-of-domain acc": best[f"env{test_env}_in_acc"],
            "test domain": records[0]["args"]["domains"][test_env], "train time (s)": seconds}
