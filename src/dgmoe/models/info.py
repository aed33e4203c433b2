"""What a built model is, declared once at construction (timm's `pretrained_cfg`, plus dgmoe's sparse
layers): the hyperparameter defaults, the transforms and the checkpoint loader read it, never the name.

`describe_model(name, **kwargs)` builds the model on the meta device (no memory, no initialisation cost) to
read its `ModelInfo` before the real one is built, e.g. to resolve hyperparameters that are arguments of
the model (stochastic depth, ResNet dropout).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from dgmoe.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from dgmoe.moe.config import MoEConfig
from dgmoe.peft.config import PeftConfig

#: hyperparameters that are arguments of a backbone family: hparam name -> model keyword.
VIT_HPARAMS = {"drop_path_rate": "drop_path_rate"}
RESNET_HPARAMS = {"resnet_dropout": "drop_rate"}


@dataclass(frozen=True)
class ModelInfo:
    """A model's facts: architecture name and family, input geometry and normalisation, its classifier's
    attribute, its sparse layers (config and block indices; None for a dense model), whether it reads
    metadata, which hyperparameters are its own constructor arguments, and its dense twin: the registered
    dense model whose checkpoints `pretrained=` adapts to it (GMoE App. C.2, MoGE §2.3; None: its own).
    A ViT's token layout too: patch size, prefix tokens (class + registers), and its FFN activation, which
    the experts of its sparse variants share; and, for a foundation model's tower, which one it is
    (`tower`: its label and paper, what `dgmoe models` says).

    What building it did, set by the factory (`set_info`; the one attribute a built model carries): its PEFT
    config (`peft`, None unless one was applied), the base weights a PEFT checkpoint names (`base_weights`: the
    registered model, the pretrained file and its sha256), what loading its checkpoint adapted (`load_report`)
    and how a zero-shot head was written (`text_load`). A run's config.json records these elsewhere (its `peft`
    section, `model_build`), so `to_dict` leaves them out (`BUILD_FACTS`)."""

    architecture: str
    family: Literal["vit", "resnet"]
    input_size: tuple[int, int, int]
    num_features: int
    classifier: str = "head"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    sparse: MoEConfig | None = None
    sparse_blocks: tuple[int, ...] = ()
    uses_metadata: bool = False
    hparam_kwargs: dict[str, str] = field(default_factory=dict)
    dense_twin: str | None = None
    peft: PeftConfig | None = None
    patch_size: int | None = None
    num_prefix_tokens: int = 0
    activation: str = "gelu"
    tower: tuple[str, str] | None = None
    base_weights: dict[str, str] | None = None
    load_report: Any = None
    text_load: str | None = None

    @property
    def is_sparse(self) -> bool:
        return self.sparse is not None

    @property
    def routes_tokens(self) -> bool:
        """Whether the model has routed layers with auxiliary losses: its own sparse FFNs or adapter experts."""
        return self.sparse is not None or (self.peft is not None and self.peft.routed)

    def to_dict(self) -> dict[str, Any]:
        """The architecture's facts as plain JSON types (what a run's config.json records under `model_info`)."""
        facts = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in BUILD_FACTS}
        return json.loads(json.dumps({k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in facts.items()}))


#: the `ModelInfo` fields that say what building a model did, not what its architecture is
BUILD_FACTS = ("peft", "base_weights", "load_report", "text_load")


def model_info(model: nn.Module) -> ModelInfo:
    """The `ModelInfo` a registered model carries (set by its builder)."""
    info = getattr(model, "info", None)
    if not isinstance(info, ModelInfo):
        raise TypeError(f"{type(model).__name__} carries no ModelInfo; build it with a dgmoe model builder")
    return info


def set_info(model: nn.Module, **facts: Any) -> nn.Module:
    """Record what building `model` did in its `ModelInfo` (`peft=`, `load_report=`, ...); returns `model`."""
    setattr(model, "info", dataclasses.replace(model_info(model), **facts))
    return model


#: `create_model` arguments about weights and wrappers, not about the architecture a description reads.
FACTORY_ONLY = ("pretrained", "pretrained_antialias", "allow_activation_mismatch", "checkpoint_path", "features_only",
                "out_indices", "text_head")


class _SkipRandomInit(TorchFunctionMode):
    """Random initialisers of meta tensors return at once: there are no values to draw, and torch's meta
    `normal_` imports torch._dynamo (about 1 s) the first time."""

    SKIPPED = (nn.init.normal_, nn.init.kaiming_normal_, nn.init.trunc_normal_, nn.init.uniform_,
               nn.init.kaiming_uniform_, nn.init.xavier_uniform_, nn.init.xavier_normal_, torch.Tensor.normal_,
               torch.Tensor.uniform_)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in self.SKIPPED:
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


def given(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments given: `None` means "the model's default", as in timm's factory (`create_model`,
    `build_on_meta`, the ViT builder and a run's `model_build` read their arguments through this)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def build_on_meta(name: str, **kwargs: Any) -> nn.Module:
    """`create_model(name, **kwargs)`'s architecture on the meta device: shapes and structure, no memory,
    no initialisation cost (weights, `features_only` and the like are ignored; `peft` is applied)."""
    from dgmoe.models.peft import apply_peft
    from dgmoe.models.registry import MODELS
    from dgmoe.peft.config import as_peft

    kwargs = {k: v for k, v in given(kwargs).items() if k not in FACTORY_ONLY}
    peft = as_peft(kwargs.pop("peft", None))
    with torch.device("meta"), _SkipRandomInit():
        model = MODELS.get(name)(**kwargs)
        return model if peft is None else apply_peft(model, peft)


def describe_model(name: str, **kwargs: Any) -> ModelInfo:
    """The `ModelInfo` of `create_model(name, **kwargs)` without building its weights."""
    return model_info(build_on_meta(name, **kwargs))
