"""Everything a run needs, resolved and validated before anything is written to disk."""
from __future__ import annotations

import contextlib
import difflib
import inspect
import json
import logging
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.nn as nn

from dgmoe.algorithms import get_algorithm
from dgmoe.algorithms.base import Algorithm, RunContext
from dgmoe.data import check_test_envs, domain_splits, get_dataset, get_spec, get_transforms, uda_splits
from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.loaders import EvalBatches, TrainBatches
from dgmoe.devices import check_compile_mode, check_precision, describe, fp32_arithmetic, resolve_device
from dgmoe.engine.build import ModelBuild, check_text_head, data_img_size, head_identity, model_build
from dgmoe.engine.combinations import check_combination
from dgmoe.engine.config import RunConfig
from dgmoe.engine.hparams import run_hparams
from dgmoe.engine.precheck import no_cuda_message
from dgmoe.engine.provenance import initialisation
from dgmoe.errors import UsageError
from dgmoe.models import MODELS
from dgmoe.models.compiled import compile_blocks
from dgmoe.models.info import model_info
from dgmoe.seeding import seed_everything, seed_hash
from dgmoe.settings import ConfigError

log = logging.getLogger("dgmoe")


@dataclass
class RunSetup:
    cfg: RunConfig
    dataset: MultiDomainDataset
    hparams: dict[str, Any]
    splits: list[tuple[np.ndarray, np.ndarray]]
    test_envs: list[int]
    train_envs: list[int]
    img_size: int
    train_transform: Any
    eval_transform: Any
    n_steps: int
    checkpoint_freq: int
    build: ModelBuild  # the network's description (`dgmoe.engine.build.model_build`), hyperparameters resolved
    network: nn.Module  # built once, seeded with cfg.seed, pretrained weights loaded
    algorithm: Algorithm  # built once around the network (its construction validates the hparams)
    uda: dict[int, np.ndarray] = field(default_factory=dict)  # test domain -> its unlabeled split (evaluated only)

    def record_args(self) -> dict[str, Any]:
        """The `args` of every DomainBed record (DomainBed's keys plus dgmoe's model, domains and, where the
        catalogue knows the dataset's versions, `data_version`)."""
        version = {"data_version": self.dataset.version} if self.dataset.version else {}
        return {**self.cfg.flat(), "test_envs": self.test_envs, "steps": self.n_steps,
                "checkpoint_freq": self.checkpoint_freq, "domains": list(self.dataset.domains), **version}

    def announcement(self) -> str:
        """The run's first line: what trains, on what (the device used and the precision), which domains are held
        out and where it writes."""
        names, cfg = self.dataset.domains, self.cfg
        held = ", ".join(names[i] for i in self.test_envs)
        return (f"{cfg.algorithm.name} with {cfg.model.name} on {self.dataset.name} "
                f"({describe(cfg.execution.device, cfg.training.precision)}): test domain"
                f"{'s' if len(self.test_envs) > 1 else ''} {held} held out, training on "
                f"{', '.join(names[i] for i in self.train_envs)} -> {cfg.execution.output_dir}")

    def summary(self) -> str:
        """The run's second line: the data's size and source, the schedule and the batch."""
        d = self.dataset
        return (f"{d.name}: {len(d.domains)} domains, {d.num_classes} classes, {self.img_size} px"
                + (f" from {d.source}" if d.source else "")
                + f"; {self.n_steps} steps, a checkpoint every {self.checkpoint_freq}, "
                  f"{self.hparams['batch_size']} images per domain per step" + self.training_what())

    def training_what(self) -> str:
        """'; PEFT <mode>: <n> of <total> parameters trainable' for a parameter-efficient run ('' for full), and
        the text tower's trained parameters where the algorithm trains it too (FLYP)."""
        tower = getattr(self.algorithm, "text_tower", None)
        text = sum(p.numel() for p in tower.parameters() if p.requires_grad) if tower is not None else 0
        if not self.cfg.peft.active:
            return f"; the image tower and the text tower's {text:,} parameters train" if text else ""
        params = list(self.network.parameters())
        trainable, total = sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)
        if text:
            return (f"; PEFT {self.cfg.peft.mode}: {trainable:,} of {total:,} image-tower parameters trainable, and "
                    f"the text tower's {text:,}")
        return f"; PEFT {self.cfg.peft.mode}: {trainable:,} of {total:,} parameters trainable"

    def phase_plan(self) -> str | None:
        """The algorithm's phases over the run's steps (LP-FT: where the probe ends), printed at the start."""
        plan = getattr(self.algorithm, "phase_plan", None)
        return plan(self.n_steps) if plan is not None else None

    def run_config(self, made_by: dict[str, Any]) -> dict[str, Any]:
        """config.json: the run config, what produced it (`made_by`, see `dgmoe.engine.provenance`), the
        resolved hparams, dataset facts, split sizes, the step-0 weights it starts from (`initialisation`: the
        pretrained file's name and hash as it is now; `head`: `head_identity`), the model build and the built
        model's `ModelInfo` (its architecture: its PEFT config is the run config's `peft` section, said once)."""
        info = model_info(self.network)
        report = info.load_report  # what loading the checkpoint adapted, and how
        return {"config": self.cfg.to_dict(), "provenance": made_by, "hparams": self.hparams,
                "dataset": {"name": self.dataset.name, "domains": list(self.dataset.domains),
                            "classes": list(self.dataset.classes), "input_shape": list(self.dataset.input_shape),
                            "sizes": self.dataset.sizes(), "version": self.dataset.version or None},
                "splits": {"train_envs": self.train_envs, "test_envs": self.test_envs,
                           "in": [len(s[0]) for s in self.splits], "out": [len(s[1]) for s in self.splits],
                           "uda": {str(i): len(idx) for i, idx in self.uda.items()}},
                "initialisation": initialisation(self.cfg.model.pretrained, self.cfg.seeds.seed),
                "head": head_identity(self.cfg, self.build.text_head),
                "model_build": {**self.build.record(),
                                "pretrained_load": report.summary() if report is not None else None,
                                **({"text_load": info.text_load} if info.text_load is not None else {})},
                "model_info": info.to_dict(),
                "n_steps": self.n_steps, "checkpoint_freq": self.checkpoint_freq}

    @property
    def on_gpu(self) -> bool:
        """On a GPU, batches travel as uint8 from pinned memory and are augmented and normalised there."""
        return self.cfg.execution.device.startswith("cuda")

    def autocast(self) -> Any:
        """The arithmetic of the step and of the checkpoint evaluations: bf16 autocast with `--precision bf16`."""
        if self.cfg.training.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.cfg.execution.device.split(":")[0], dtype=torch.bfloat16)

    def arithmetic(self) -> Any:
        """The fp32 arithmetic of the whole run, set once (`dgmoe.devices.fp32_arithmetic`): TF32 with
        `--precision tf32`, IEEE fp32 otherwise, on CUDA; the previous switches restored on exit."""
        return fp32_arithmetic(self.cfg.training.precision, self.cfg.execution.device)

    def step_begins(self) -> None:
        """Called before each update: with CUDA graphs (`--compile --compile-mode reduce-overhead`) it tells torch
        a new step begins, whose graph replays may overwrite the previous step's outputs; otherwise nothing."""
        ex = self.cfg.execution
        if ex.compile and ex.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()

    def placed_algorithm(self) -> Algorithm:
        """The algorithm on the run's device, its network compiled block by block with `--compile`
        (`dgmoe.models.compiled`) and its optimisers fused with `--fused-optimizer`: the trainer and `dgmoe
        bench data` train exactly this. Idempotent; first called before the first step (a resumed state loads after)."""
        ex = self.cfg.execution
        self.algorithm.to(ex.device)
        if ex.compile:
            compile_blocks(self.algorithm.network, mode=ex.compile_mode)
        if self.cfg.training.fused_optimizer:
            self.algorithm.use_fused_optimizers()
        return self.algorithm

    def train_batches(self) -> TrainBatches:
        """The run's training batches: one draw per training domain and step, seeded by the run's seed."""
        device = self.cfg.execution.device if self.on_gpu else None
        return TrainBatches([self.dataset[i] for i in self.train_envs], [self.splits[i][0] for i in self.train_envs],
                            self.hparams["batch_size"], seed_hash(self.cfg.seeds.seed, "batches"),
                            self.train_transform, domain_ids=self.train_envs, device=device)

    def eval_batches(self, num_workers: int | None = None) -> EvalBatches:
        """The run's evaluation batches (`num_workers`: the run's unless given)."""
        ex = self.cfg.execution
        return EvalBatches(self.eval_transform, ex.eval_batch_size,
                           ex.num_workers if num_workers is None else num_workers, pin_memory=self.on_gpu,
                           device=ex.device if self.on_gpu else None)

    def identity(self) -> dict[str, Any]:
        """The run's identity with its schedule resolved (what its resume state carries)."""
        return self.cfg.replace(steps=self.n_steps, checkpoint_freq=self.checkpoint_freq).identity()


def check_device(device: str) -> None:
    """Refuse a `--device` this machine does not have, before anything is written."""
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {device!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps)") from None
    if kind.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UsageError(no_cuda_message(device))
        if kind.index is not None and kind.index >= count:
            raise UsageError(f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    elif kind.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {device}: MPS is not available on this machine; use --device cpu")


def checkpoint_family_mismatch(path: str, model: str, info: Any) -> str | None:
    """'holds a ResNet's weights, and --model X is a ViT' (or a sparse ViT's weights for a dense model, or the
    other way round) when a checkpoint that failed to load is of another family than the model; None when the
    keys do not tell (the loader's own error then stands)."""
    from dgmoe.models.pretrained import load_checkpoint_file

    try:
        keys = list(load_checkpoint_file(path))
    except (UsageError, OSError, ValueError, RuntimeError):
        return None
    resnet = "conv1.weight" in keys and any(k.startswith("layer1.") for k in keys)
    vit = "cls_token" in keys or any(k.startswith("blocks.") for k in keys)
    sparse = any(".mlp.experts." in k for k in keys)
    kind = "ResNet" if resnet else ("sparse (MoE) ViT" if sparse else "dense ViT") if vit else None
    mine = "ResNet" if info.family == "resnet" else ("sparse (MoE) ViT" if info.sparse is not None else "dense ViT") \
        if info.family == "vit" else None
    if kind is None or mine is None or kind == mine or (kind == "dense ViT" and mine == "sparse (MoE) ViT"):
        return None  # (a dense ViT's weights into a sparse one: its FFN is copied into the experts)
    return f"holds a {kind}'s weights, and --model {model} is a {mine}: pass a {mine} checkpoint or pick its model"


def kwarg_suggestion(error: Exception) -> str:
    """' Did you mean: ...?' for "<Class>.__init__() got an unexpected keyword argument 'x'" from a dgmoe model
    class: the close names among that class's parameters ('' when none is close or the class is not found)."""
    found = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'", str(error))
    if not found:
        return ""
    name, bad = found.groups()
    for module in list(sys.modules.values()):
        cls = getattr(module, name, None) if getattr(module, "__name__", "").startswith("dgmoe.models") else None
        if isinstance(cls, type):
            params = [p for p in inspect.signature(cls).parameters if p != "self"]
            close = difflib.get_close_matches(bad, params, n=3, cutoff=0.6)
            return f". Did you mean: {', '.join(close)}?" if close else ""
    return ""


def check_validation_splits(dataset: MultiDomainDataset, splits: list[tuple[np.ndarray, np.ndarray]],
                            train_envs: list[int], holdout_fraction: float, n_per_domain: int | None) -> None:
    """Refuse a run whose training domains' held-out (`out`) splits are empty, before anything is written:
    training-domain validation, leave-one-domain-out's single runs, the closing line and best.safetensors read
    them; with none, a "selected" accuracy would be a checkpoint chosen without validation data. (A held-out
    domain's empty `out` split leaves only the oracle without data; WILDS' selection reads whole splits.)"""
    counts = {dataset.domains[i]: len(splits[i][0]) + len(splits[i][1]) for i in train_envs if len(splits[i][1]) == 0}
    if not counts:
        return
    need = max(1, math.ceil(1 / holdout_fraction))
    while int(need * holdout_fraction) < 1:
        need += 1
    sizes = (f"{next(iter(counts.values()))} images each" if len(set(counts.values())) == 1 else
             ", ".join(f"{d}: {n} images" for d, n in counts.items()))
    fix = (f"use --n-per-domain >= {need}" if n_per_domain is not None else f"a domain needs >= {need} images") + \
        " or a larger --holdout-fraction"
    raise UsageError(f"--holdout-fraction {holdout_fraction} leaves no validation images (out split) in training "
                     f"domain{'s' if len(counts) > 1 else ''} {', '.join(counts)} ({sizes}); model selection needs "
                     f"them: {fix}")


def prepare_run(cfg: RunConfig) -> RunSetup:
    """Resolve names, hyperparameters, data and splits; raise a specific error on any bad input. The network is
    built once (`ModelBuild.build`: a full CLIP file is read once for the image tower and the zero-shot head) and
    the algorithm receives what the run knows beyond it (`Algorithm.attach_run`: FLYP the text tower that wrote
    the head, CLIPood the run's number of updates)."""
    cfg = cfg.replace(device=resolve_device(cfg.execution.device))  # `--device auto`: the device used, recorded
    data, model, alg, seeds = cfg.data, cfg.model, cfg.algorithm, cfg.seeds
    check_device(cfg.execution.device)
    check_precision(cfg.training.precision, cfg.execution.device)
    check_compile_mode(cfg.execution.compile_mode, cfg.execution.compile, cfg.execution.device)
    MODELS.get(model.name)                  # unknown names fail before data is read
    model.check_head()
    algorithm_cls = get_algorithm(alg.name)
    spec = get_spec(data.dataset)
    size = data_img_size(cfg)  # a model built for another size than the data's default takes its own
    dataset = get_dataset(data.dataset, cfg.execution.data_dir, size, n_per_domain=data.n_per_domain)
    test_envs = check_test_envs(dataset, data.test_envs)
    train_envs = [i for i in range(len(dataset)) if i not in test_envs]
    if len(train_envs) < algorithm_cls.MIN_TRAIN_DOMAINS:
        raise UsageError(f"{alg.name} needs at least {algorithm_cls.MIN_TRAIN_DOMAINS} training domains; "
                         f"--test-envs {test_envs} leaves {len(train_envs)} of {len(dataset)}")
    splits, uda = uda_splits(domain_splits(dataset, data.holdout_fraction, seeds.trial_seed), test_envs,
                             data.uda_holdout_fraction, seeds.trial_seed)  # (seeded locally: no global RNG drawn)
    check_validation_splits(dataset, splits, train_envs, data.holdout_fraction, data.n_per_domain)
    img_size = dataset.input_shape[-1]
    build = model_build(cfg, dataset)

    def built(make: Callable[[], Any]) -> Any:  # bad kwargs or sizes fail here, before anything is written
        try:
            return make()
        except ConfigError as e:  # a model's own config (`MoEConfig`) refused a keyword
            raise UsageError(f"--model {model.name} cannot be built with {overrides(build)}: {e}") from None
        except UsageError:
            raise
        except (TypeError, ValueError, ZeroDivisionError, RuntimeError) as e:
            raise UsageError(f"--model {model.name} cannot be built with {overrides(build)} "
                             f"(--model-kwargs/--patch-size/--img-size): {e}{kwarg_suggestion(e)}") from e

    def overrides(build: ModelBuild) -> Any:  # what the command line gave
        return {k: v for k, v in build.kwargs.items() if k in model.kwargs or k in ("patch_size", "img_size")} \
            or "its defaults"

    if build.peft is not None and not model.pretrained:
        log.warning(f"--peft {build.peft.mode} without --pretrained freezes a randomly initialised tower (only the "
                    "PEFT weights train); pass --pretrained FILE to adapt pretrained weights")
    info = built(build.describe)
    hparams = run_hparams(alg.name, data.dataset, info, seeds.hparams_seed, seeds.trial_seed, alg.hparams)
    n_steps = spec.n_steps if cfg.training.steps is None else cfg.training.steps  # 0: evaluate once
    check_combination(alg.name, n_steps, cfg.peft.mode, hparams,
                      None if cfg.training.steps is not None else f"the catalogue's {n_steps} steps of {data.dataset}")
    train_tf, eval_tf = get_transforms(data.dataset, img_size, hparams.get("data_augmentation", True), info.mean,
                                       info.std)
    build = build.with_hparams(hparams, info)  # the backbone's own hyperparameters are arguments of the model
    if build.text_head is not None:  # a CLIP tower, its text tower's file, the templates: before the build
        check_text_head(cfg, build.text_head, info)
    seed_everything(seeds.seed)
    try:
        made = built(build.build)
    except UsageError as e:
        other = checkpoint_family_mismatch(model.pretrained, model.name, info) if model.pretrained else None
        if other:
            raise UsageError(f"--pretrained {model.pretrained} {other} ({e})") from e
        raise
    network = made.model
    try:
        algorithm = algorithm_cls(network, dataset.num_classes, len(train_envs), hparams)
    except UsageError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        given = f"--hparams {json.dumps(alg.hparams, sort_keys=True)}" if alg.hparams else "its default hyperparameters"
        raise UsageError(f"--algorithm {alg.name} rejects {given}: {e}") from e
    algorithm.attach_run(RunContext(n_steps, build.text_head, made.text_tower))
    return RunSetup(cfg, dataset, hparams, splits,
                    test_envs, train_envs, img_size, train_tf, eval_tf,
                    n_steps, cfg.training.checkpoint_freq or spec.checkpoint_freq,
                    build, network, algorithm, uda)
