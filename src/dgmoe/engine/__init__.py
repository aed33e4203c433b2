"""Training, evaluation, checkpoints: `train(TrainConfig(...))` runs one DomainBed run."""
from dgmoe.engine.config import TrainConfig
from dgmoe.engine.train import RunResult, train

__all__ = ["RunResult", "TrainConfig", "train"]
