"""The network a run trains, described once: `model_build(cfg, dataset)` turns a run's settings and its data's
shape into the registered model's name, `create_model`'s arguments, the PEFT config it applies and the zero-shot
head it writes (`text_head_spec`: the one reader of `--head`). Training
(`dgmoe.engine.setup.prepare_run`), a sweep's checks before launching (`dgmoe.sweep.jobs.check_sweep`) and
rebuilding a run folder's network from its config.json (`dgmoe.engine.checkpoint.build_network`: analysis,
export, parameter counts) all build through it.
"""
from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from dgmoe.engine.config import RunConfig
from dgmoe.models.info import given
from dgmoe.names import is_text_head
from dgmoe.peft.config import PeftConfig

if TYPE_CHECKING:
    import torch.nn as nn

    from dgmoe.models.clip.head_spec import TextHeadSpec
    from dgmoe.models.factory import BuiltModel
    from dgmoe.models.info import ModelInfo

log = logging.getLogger("dgmoe")

#: `create_model` arguments about the weights a network starts from (not its architecture)
WEIGHTS = ("pretrained", "pretrained_antialias")


class DataShape(Protocol):
    """What a build reads of a dataset: a `MultiDomainDataset`, or `RecordedData` (a run's config.json)."""

    @property
    def name(self) -> str: ...

    @property
    def classes(self) -> Sequence[str]: ...

    @property
    def num_classes(self) -> int: ...

    @property
    def input_shape(self) -> Sequence[int]: ...


@dataclass(frozen=True)
class RecordedData:
    """A dataset's shape as a run's config.json records it (its `dataset` object)."""

    num_classes: int
    input_shape: tuple[int, ...]
    name: str = ""
    classes: tuple[str, ...] = ()

    @classmethod
    def of_run(cls, run_config: Mapping[str, Any]) -> "RecordedData":
        dataset = run_config["dataset"]
        return cls(len(dataset["classes"]), tuple(dataset["input_shape"]), dataset.get("name") or "",
                   tuple(dataset["classes"]))


@dataclass(frozen=True)
class ModelBuild:
    """A network as `create_model(name, peft=peft, text_head=text_head, **kwargs)` builds it; `kwargs` hold no
    `None` (the model's default is meant: left out by `dgmoe.models.info.given`, the one rule the factory reads its
    arguments by)."""

    name: str
    kwargs: dict[str, Any]
    peft: PeftConfig | None = None
    text_head: "TextHeadSpec | None" = None  # CLIP's zero-shot head (`--head zeroshot`), written by the build

    def describe(self) -> "ModelInfo":
        """The network's `ModelInfo`, read from its architecture on the meta device (no weights)."""
        from dgmoe.models.info import describe_model

        return describe_model(self.name, peft=self.peft, **self.kwargs)

    def create(self) -> "nn.Module":
        return self.build().model

    def build(self) -> "BuiltModel":
        """The network, and the text tower that wrote its zero-shot head (`dgmoe.models.factory.build_model`)."""
        from dgmoe.models.factory import build_model

        return build_model(self.name, peft=self.peft, text_head=self.text_head, **self.kwargs)

    def with_hparams(self, hparams: Mapping[str, Any], info: "ModelInfo") -> "ModelBuild":
        """The backbone's own hyperparameters (stochastic depth, ResNet dropout: `info.hparam_kwargs`) as
        arguments of the model."""
        own = {kw: hparams[name] for name, kw in info.hparam_kwargs.items() if name in hparams}
        return dataclasses.replace(self, kwargs={**self.kwargs, **own})

    def with_weights(self, pretrained: str | None, antialias: bool = True) -> "ModelBuild":
        """The same network from another pretrained file (None: its initialisation, and a zero-shot head's shape
        without its text tower, for weights that follow)."""
        kwargs = {k: v for k, v in self.kwargs.items() if k not in WEIGHTS}
        if pretrained is not None:
            kwargs.update(pretrained=pretrained, pretrained_antialias=antialias)
        head = self.text_head.shape_only() if self.text_head is not None and pretrained is None else self.text_head
        return dataclasses.replace(self, kwargs=kwargs, text_head=head)

    def record(self) -> dict[str, Any]:
        """What config.json records under `model_build` (its PEFT config is the run's `peft` section; a zero-shot
        head as `text_head: true`, its identity under the run's `head`)."""
        return {"name": self.name, "kwargs": {**self.kwargs, **({"text_head": True} if self.text_head else {})}}


def model_build(cfg: RunConfig, dataset: DataShape | None = None) -> ModelBuild:
    """The network `cfg` trains on `dataset` (None: the model's default classes and input, as a sweep checks
    its grid before any data is read): the data's classes, size and channels, `--patch-size`, `--model-kwargs`
    over them, the `--pretrained` file by its absolute path (what a PEFT checkpoint records of its base weights),
    a zero-shot text head (`text_head_spec`), and `cfg.peft` unless every weight trains. The backbone's
    hyperparameters join once they are resolved (`ModelBuild.with_hparams`)."""
    model = cfg.model
    kwargs: dict[str, Any] = {}
    if dataset is not None:
        shape = tuple(dataset.input_shape)
        kwargs.update(num_classes=dataset.num_classes, img_size=shape[-1], in_chans=shape[0])
    kwargs.update(patch_size=model.patch_size, **model.kwargs)
    if model.pretrained:
        path = Path(model.pretrained)
        kwargs.update(pretrained=str(path.resolve()) if path.is_file() else model.pretrained,
                      pretrained_antialias=model.pretrained_antialias)
    head = text_head_spec(cfg, dataset.name, dataset.classes) if dataset is not None else text_head_spec(cfg, "", ())
    return ModelBuild(model.name, given(kwargs), cfg.peft if cfg.peft.active else None, head)


def text_head_spec(cfg: RunConfig, dataset: str, classes: Sequence[str]) -> "TextHeadSpec | None":
    """CLIP's zero-shot head of `cfg` on the data `dataset` with `classes` (label order), None for a linear head:
    the text tower's file (`--text-pretrained`, else `--pretrained`) or, without one, the stand-in towers' text
    tower seeded by the run's seed; each label's class name as the prompts say it (a one-line error for class
    folders the catalogue does not name, `match_class_names`); `--prompt-templates`; the run's device."""
    model = cfg.model
    if not is_text_head(model.head):
        return None
    from dgmoe.data.class_matching import match_class_names
    from dgmoe.devices import resolve_device
    from dgmoe.models.clip.head_spec import TextHeadSpec

    matched = match_class_names(dataset, tuple(classes))
    source = model.text_pretrained or model.pretrained
    return TextHeadSpec(source, cfg.seeds.seed if source is None else None, matched.names, model.prompt_templates,
                        matched.renamed, resolve_device(cfg.execution.device))


def check_text_head(cfg: RunConfig, spec: "TextHeadSpec", info: "ModelInfo") -> None:
    """What writing the zero-shot head `spec` needs, checked before the network is built (one-line errors): the
    templates, a CLIP image tower (`info`), its text tower's file, or without one a stand-in tower (whose text
    tower is drawn from the run's seed). Class folders matched only by name are said in an info line."""
    from dgmoe.errors import UsageError
    from dgmoe.models.clip.templates import templates
    from dgmoe.models.clip.text_tower import STAND_INS, text_config
    from dgmoe.models.pretrained import missing_checkpoint
    from dgmoe.names import HUB_PREFIXES, weights_help

    model = cfg.model
    if spec.renamed:
        log.info(f"{cfg.data.dataset}: class folders matched to the catalogue's class names by case and _/-/space, "
                 f"the prompts name them so: {spec.mapping()}")
    templates(spec.templates)
    text_config(info.tower, model.name)
    if spec.weights is not None:
        if not spec.weights.startswith(HUB_PREFIXES) and not Path(spec.weights).is_file():
            raise missing_checkpoint(Path(spec.weights))
    elif info.tower is None or info.tower[0] not in STAND_INS:
        raise UsageError(f"--head zeroshot needs CLIP's text tower: give --pretrained (a full CLIP file) or "
                         f"--text-pretrained for --model {model.name}. {weights_help(model.name)}")


def head_identity(cfg: RunConfig, spec: "TextHeadSpec | None") -> dict[str, Any]:
    """The classifier head a run starts from, beside its `initialisation` (recorded in config.json as "head" when
    the run starts): its kind and, for CLIP's zero-shot head (`spec`), the prompt templates (a set's name, or the
    file's name and content hash: `pretrained_identity`), the class names the prompts give and the text tower
    that encoded them (its file's name and content hash, or the stand-in's seed). Weights averaged or
    interpolated (WiSE-FT's zero-shot theta_0 and the run fine-tuned from it) must share it."""
    from dgmoe.engine.provenance import pretrained_identity
    from dgmoe.models.clip.templates import TEMPLATE_SETS

    if spec is None:
        return {"kind": cfg.model.head}
    given = spec.templates
    return {"kind": cfg.model.head,
            "templates": given if given in TEMPLATE_SETS else pretrained_identity(given),
            "class_names": list(spec.class_names),
            "text_tower": pretrained_identity(spec.weights) or f"seeded random text tower, seed {spec.seed}"}


def run_build(run_config: Mapping[str, Any]) -> ModelBuild:
    """The network of a run folder, from its config.json (its settings, recorded data shape and resolved
    hyperparameters), untrained and without its pretrained weights (the run's own weights follow). A folder
    written before PEFT had its own section reads the same (`RunConfig.from_dict` moves its knobs)."""
    with warnings.catch_warnings():  # settings this dgmoe no longer knows: said where the run's settings are read
        warnings.simplefilter("ignore")
        cfg = RunConfig.from_dict(run_config["config"], strict=False)
    build = model_build(cfg, RecordedData.of_run(run_config))
    return build.with_hparams(run_config.get("hparams") or {}, build.describe()).with_weights(None)


def data_img_size(cfg: RunConfig) -> int | None:
    """The size the run's images are decoded at: `--img-size`, else the size its model is registered for, said
    in an info line, where the dataset has no size of its own (a folder of images decoded at dgmoe's default,
    224 px) but the model is built for another (and `--model-kwargs` gives no `img_size`): a 28 px stand-in on
    PACS runs at 28 px, not at 224 px with every 7 px patch of it a 32 px one. None: the dataset's own size
    (MNIST's 28 px, iWildCam's 448) or the default. The run's settings keep what was given (the same command
    resumes the same run); its config.json's `dataset.input_shape` records the size."""
    from dgmoe.data.catalogue import DEFAULT_IMG_SIZE, get_spec
    from dgmoe.models.info import describe_model

    model = cfg.model
    if cfg.data.img_size is not None or "img_size" in model.kwargs or get_spec(cfg.data.dataset).native_size:
        return cfg.data.img_size
    size = describe_model(model.name).input_size[-1]
    if size == DEFAULT_IMG_SIZE:
        return None
    log.info(f"--model {model.name} is built for {size} px images: {cfg.data.dataset} is decoded at {size} px, "
             f"not at the default {DEFAULT_IMG_SIZE} px (--img-size sets the size)")
    return size
