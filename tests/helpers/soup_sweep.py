"""A real, tiny CPU sweep for the soup tests: RotatedMNIST, a one-block micro ViT, 3 steps, trained in this
process (`dgmoe.engine.trainer.train`) in the folders `dgmoe sweep launch` lays out: 2 held-out domains x
3 hparams draws x 2 trials, every run of a trial from one initialisation (`SweepConfig.shared_init`)."""
from __future__ import annotations

from pathlib import Path

from dgmoe.engine.config import RunConfig
from dgmoe.engine.trainer import train
from dgmoe.sweep.config import SweepConfig
from dgmoe.sweep.jobs import build_jobs

TINY = dict(model_kwargs={"depth": 1}, n_per_domain=20, steps=3, checkpoint_freq=2, num_threads=1, progress="none")
MODEL = "vit_micro_patch7_28"


def make_soup_sweep(root: Path, n_hparams: int = 3, n_trials: int = 2, shared_init: bool = True,
                    algorithms: tuple[str, ...] = ("ERM",)) -> list[Path]:
    cfg = SweepConfig(datasets=("RotatedMNIST",), algorithms=algorithms, models=(MODEL,), output_dir=str(root),
                      base=RunConfig.from_flat(TINY), n_hparams=n_hparams, n_trials=n_trials, single_test_envs=True,
                      only_test_envs=(0, 1), shared_init=shared_init)
    jobs = build_jobs(cfg)
    for job in jobs:
        train(job.config)
    return [job.dir for job in jobs]
