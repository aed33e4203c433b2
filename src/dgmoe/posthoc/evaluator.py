"""A finished run's network rebuilt for evaluation after training, with weights given to it: the one place
post-hoc evaluation (soups, WiSE-FT, leaderboard predictions) rebuilds a run folder's model (`rebuild`), and the
evaluations a soup makes with it (DomainBed's records over every domain's splits, training-domain validation
accuracy)."""
from __future__ import annotations

from typing import Any

import torch

from dgmoe.data.loaders import EvalBatches
from dgmoe.devices import resolve_device
from dgmoe.engine.checkpoint import load_state
from dgmoe.engine.config import RunConfig
from dgmoe.engine.evaluate import evaluate_domains, split_metrics
from dgmoe.engine.setup import RunSetup, prepare_run


def rebuild(run: RunConfig, device: str, data_dir: str | None = None) -> RunSetup:
    """The run's data, splits and algorithm as it built them when it trained (`dgmoe.engine.setup.prepare_run`),
    on `device`, its data read from `data_dir` when given (else the run's own --data-dir)."""
    device = resolve_device(device)  # auto: the device used
    setup = prepare_run(run.replace(device=device, **({"data_dir": data_dir} if data_dir else {})))
    setup.algorithm.to(device)
    return setup


def holding(setup: RunSetup, state: dict[str, torch.Tensor]) -> Any:
    """The run's algorithm with `state` loaded into the network it predicts with."""
    load_state(setup.algorithm.inference_network(), state)
    return setup.algorithm


class Evaluator:
    """The data, splits and an algorithm of one (dataset, held-out domains, trial seed), built once."""

    def __init__(self, run: RunConfig, device: str, data_dir: str | None, eval_batch_size: int, num_workers: int):
        self.device = resolve_device(device)  # auto: the device used
        self.setup = rebuild(run, self.device, data_dir)
        self.batches = EvalBatches(self.setup.eval_transform, eval_batch_size, num_workers)

    def holding(self, state: dict[str, torch.Tensor]) -> Any:
        """The run's algorithm with `state` loaded into the network it predicts with."""
        return holding(self.setup, state)

    def val_acc(self, predictor: Any) -> float:
        """Training-domain validation accuracy: the mean `out` accuracy over the training domains (DomainBed)."""
        s = self.setup
        was = predictor.training
        predictor.eval()
        try:
            accs = [split_metrics(predictor.predict, s.dataset[i], s.splits[i][1], s.eval_transform,
                                  self.device, batches=self.batches)[0] for i in s.train_envs]
        finally:
            predictor.train(was)
        return sum(accs) / len(accs)

    def record(self, predictor: Any) -> dict[str, Any]:
        """The accuracies and losses of every domain's splits, as a run's checkpoint record holds them."""
        s = self.setup
        return evaluate_domains(predictor, s.dataset, s.splits, s.eval_transform, self.device,
                                test_envs=s.test_envs, uda=s.uda, batches=self.batches)
