"""Registered models at toy size, for the contract tests over every model (`tests/models/test_*contract.py`)."""
import torch

from dgmoe.models.info import describe_model

NUM_CLASSES = 3


def toy_kwargs(name: str) -> dict:
    """Toy size from the model's own description: ViTs at 32 px and width 32, ResNets at 32 px."""
    info = describe_model(name)
    if info.family == "resnet":
        return {"num_classes": NUM_CLASSES, "img_size": 32}
    kwargs = {"num_classes": NUM_CLASSES, "img_size": 32, "embed_dim": 32, "num_heads": 2}
    if "r26" not in info.architecture:  # a hybrid's patch grid comes from its ResNet stem
        kwargs["patch_size"] = 8
    return kwargs


def inputs(info, batch: int = 2):
    x = torch.randn(batch, *info.input_size)
    meta = {"lat": torch.tensor([10.0, -45.0]), "lon": torch.tensor([100.0, -3.0])} if info.uses_metadata else None
    return x, meta
