"""Does the input pipeline keep up with the model? `dgmoe bench data`.

For one `dgmoe train` configuration (dataset, folder, model, batch size, device), this measures in one
process:
- the loader: images per second that `TrainBatches` delivers, exactly as the trainer builds it (the
  same draws and augmentations; on a GPU uint8 batches pinned, copied and augmented on the device), for
  each worker count, after a warm-up that starts the workers;
- the model: images per second of the algorithm's update on one fixed batch already on the device (the
  step alone, no loading), timed as the trainer runs it (back-to-back steps, one synchronisation);
and prints each loader rate next to the step's, with their ratio: below 1, training waits for data;
- the training loop: loader and update together, as `dgmoe train` runs them (on a GPU the loader builds the
  next steps in a background thread on a side stream while the update runs), and its share of the step's
  img/s: what training delivers of what the model can consume;
- evaluation: images per second of a checkpoint's evaluation of every split (`evaluate_domains` with one
  `EvalBatches`, as the trainer calls it, in the run's precision), at its second pass, when persistent
  workers are already started (the first pass, with their start-up, is printed beside it).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from dgmoe.bench.config import DataBenchConfig
from dgmoe.bench.timing import device_sync
from dgmoe.data.loaders import TrainBatches
from dgmoe.engine.config import RunConfig
from dgmoe.engine.evaluate import evaluate_domains
from dgmoe.engine.setup import prepare_run


def _rate(setup, batches: TrainBatches, workers: int, cfg: DataBenchConfig, images_per_step: int,
          consume: Callable[[list, int], Any] = lambda minibatches, step: None) -> float:
    """img/s of the trainer's loader, each step's batches moved to the device and handed to `consume`
    (nothing: the loader alone; the update: the training loop), timed after `cfg.warmup` steps."""
    device = setup.cfg.execution.device
    sync = device_sync(device)
    it = batches.iter_from(0, None, workers, pin_memory=setup.on_gpu)
    try:
        for step in range(cfg.warmup + cfg.steps):
            if step == cfg.warmup:
                sync()
                start = time.perf_counter()
            consume([b.to(device) for b in next(it)], step)
        sync()
    finally:
        it.close()
    return cfg.steps * images_per_step / (time.perf_counter() - start)


def _loop_rate(setup, batches: TrainBatches, workers: int, cfg: DataBenchConfig, images_per_step: int) -> float:
    """img/s of the trainer's loop: the next step's batches, moved to the device, and the update."""
    algorithm = setup.placed_algorithm()

    def update(minibatches: list, step: int) -> Any:
        setup.step_begins()
        return algorithm.update(minibatches, step)

    with setup.autocast():
        return _rate(setup, batches, workers, cfg, images_per_step, update)


def _eval_rates(run: RunConfig, setup, workers: int) -> tuple[float, float]:
    """(img/s of the first evaluation, img/s of the second) of every split with `workers` loader workers."""
    device = run.execution.device
    batches = setup.eval_batches(workers)
    images = sum(len(idx) for split in setup.splits for idx in split)
    sync, rates = device_sync(device), []
    for _ in range(2):
        start = time.perf_counter()
        with setup.autocast():
            evaluate_domains(setup.algorithm, setup.dataset, setup.splits, setup.eval_transform, device,
                             run.execution.eval_batch_size, workers, setup.test_envs, None, batches)
        sync()
        rates.append(images / (time.perf_counter() - start))
    return rates[0], rates[1]


def _step_rate(run: RunConfig, setup, batches: TrainBatches, cfg: DataBenchConfig, images_per_step: int) -> float:
    device = run.execution.device
    algorithm = setup.placed_algorithm().train()
    minibatches = [b.to(device) for b in batches.batch_at(0)]
    sync = device_sync(device)
    with setup.autocast():
        for step in range(cfg.warmup):
            setup.step_begins()
            algorithm.update(minibatches, step)
        sync()
        start = time.perf_counter()
        for step in range(cfg.steps):
            setup.step_begins()
            algorithm.update(minibatches, cfg.warmup + step)
        sync()
    return cfg.steps * images_per_step / (time.perf_counter() - start)


def bench_data(run: RunConfig, cfg: DataBenchConfig = DataBenchConfig()) -> list[dict]:
    """One row per worker count: loader img/s, the model step's img/s, their ratio, the training loop's img/s
    and its share of the step's, and evaluation img/s (steady, and the first pass with the workers' start-up)."""
    setup = prepare_run(run)
    run = setup.cfg  # (`--device auto` resolved)
    with setup.arithmetic():  # TF32 on (tf32) or off (fp32) on CUDA, as the trainer sets it
        return _rows(run, setup, cfg)


def _rows(run: RunConfig, setup, cfg: DataBenchConfig) -> list[dict]:
    batches = setup.train_batches()  # exactly the trainer's
    images = setup.hparams["batch_size"] * len(setup.train_envs)
    step = _step_rate(run, setup, batches, cfg, images)
    rows = []
    for workers in cfg.workers:
        loader = _rate(setup, batches, workers, cfg, images)
        loop = _loop_rate(setup, batches, workers, cfg, images)
        first, steady = _eval_rates(run, setup, workers)
        rows.append({"workers": str(workers), "loader (img/s)": loader, "model step (img/s)": step,
                     "loader / step": loader / step, "training loop (img/s)": loop, "loop / step": loop / step,
                     "evaluation (img/s)": steady, "first evaluation (img/s)": first})
    return rows
