"""Does the input pipeline keep up with the model? `dgmoe bench data`.

For one `dgmoe train` configuration (dataset, folder, model, batch size, device), this measures in one
process:
- the loader: images per second that `TrainBatches` delivers, exactly as the trainer builds it (the
  same draws and augmentations; on a GPU uint8 batches pinned, copied and augmented on the device), for
  each worker count, after a warm-up that starts the workers;
- the model: images per second of the algorithm's update on one fixed batch already on the device (the
  step alone, no loading), timed as the trainer runs it (back-to-back steps, one synchronisation);
and prints each loader rate next to the step's, with their ratio: below 1, training waits for data.
"""
from __future__ import annotations

import contextlib
import time

import torch

from dgmoe.bench.configs import DataBenchConfig
from dgmoe.bench.timing import device_sync
from dgmoe.data.loaders import TrainBatches
from dgmoe.engine.config import RunConfig
from dgmoe.engine.setup import prepare_run
from dgmoe.seeding import seed_hash


def _loader_rate(batches: TrainBatches, workers: int, cfg: DataBenchConfig, images_per_step: int, on_gpu: bool,
                 device: str) -> float:
    sync = device_sync(device)
    it = batches.iter_from(0, None, workers, pin_memory=on_gpu)
    for _ in range(cfg.warmup):
        [b.to(device) for b in next(it)]
    sync()
    start = time.perf_counter()
    for _ in range(cfg.steps):
        [b.to(device) for b in next(it)]
    sync()
    return cfg.steps * images_per_step / (time.perf_counter() - start)


def _step_rate(run: RunConfig, setup, batches: TrainBatches, cfg: DataBenchConfig, images_per_step: int) -> float:
    device = run.execution.device
    algorithm = setup.algorithm.to(device).train()
    minibatches = [b.to(device) for b in batches.batch_at(0)]
    autocast = (torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
                if run.training.precision == "bf16" else contextlib.nullcontext())
    sync = device_sync(device)
    with autocast:
        for step in range(cfg.warmup):
            algorithm.update(minibatches, step)
        sync()
        start = time.perf_counter()
        for step in range(cfg.steps):
            algorithm.update(minibatches, cfg.warmup + step)
        sync()
    return cfg.steps * images_per_step / (time.perf_counter() - start)


def bench_data(run: RunConfig, cfg: DataBenchConfig = DataBenchConfig()) -> list[dict]:
    """One row per worker count: loader img/s, the model step's img/s and their ratio."""
    setup = prepare_run(run)
    device = run.execution.device
    on_gpu = device.startswith("cuda")
    batch_size = setup.hparams["batch_size"]
    batches = TrainBatches([setup.dataset[i] for i in setup.train_envs], [setup.splits[i][0] for i in setup.train_envs],
                           batch_size, seed_hash(run.seeds.seed, "batches"), setup.train_transform,
                           domain_ids=setup.train_envs, device=device if on_gpu else None)
    images = batch_size * len(setup.train_envs)
    step = _step_rate(run, setup, batches, cfg, images)
    rows = []
    for workers in cfg.workers:
        loader = _loader_rate(batches, workers, cfg, images, on_gpu, device)
        rows.append({"workers": str(workers), "loader (img/s)": loader, "model step (img/s)": step,
                     "loader / step": loader / step})
    return rows
