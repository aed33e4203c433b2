"""The configs of the `dgmoe bench` commands: what each benchmark measures and how often. Their options are
generated from these fields (`dgmoe.cli.options`); the benchmarks take them (and fresh worker processes
rebuild them from their JSON). This module imports no torch, so that `dgmoe bench --help` starts at once
(torch is imported when a config is built with `--device auto`, to resolve it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dgmoe.bench.timing import MIN_ROUNDS, MIN_WARMUP
from dgmoe.devices import (
    AUTO,
    PRECISIONS,
    check_compile_mode,
    check_precision,
    compile_mode_setting,
    device_setting,
    precision_setting,
    resolve_device,
)
from dgmoe.names import check_model
from dgmoe.settings import Settings, comma_ints, comma_names, setting

DEFAULT_MODELS = ("vit_small_patch16_224", "gmoe_small_patch16_224", "sfmoe_small_patch16_224",
                  "moge_small_patch16_224", "resnet50")
def model_names(text: str) -> tuple[str, ...]:
    """A comma list of registered model names; an unknown one is refused with the registry's error, before the
    benchmark starts its worker processes."""
    names = comma_names(text)
    for name in names:
        check_model(name)
    return names


_ROUNDS = f"Timed rounds (at least {MIN_ROUNDS}), after 2 untimed warm-up rounds."


class _OnDevice(Settings):
    """A benchmark's config whose `--device auto` is resolved on construction to the device used (a config that
    exists names a real device), with `--precision` (and `--compile-mode`) checked against it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        device = resolve_device(self.device)  # type: ignore[attr-defined]
        object.__setattr__(self, "device", device)
        check_precision(getattr(self, "precision", "fp32"), device)
        check_compile_mode(getattr(self, "compile_mode", "default"), getattr(self, "compile", False), device)


@dataclass(frozen=True)
class BenchmarkConfig:
    backbone: str
    algorithms: tuple[str, ...]
    steps: int = 6
    warmup: int = 1
    domains: int = 3
    batch_per_domain: int = 16
    img_size: int = 32
    patch_size: int | None = 4  # None: the model's own (ResNets and hybrid stems take none)
    num_classes: int = 7
    threads: int = 1
    seed: int = 0
    device: str = AUTO  # resolved by `benchmark_algorithms`
    model_overrides: tuple[tuple[str, Any], ...] = field(default_factory=tuple)
    group_size: int = 12  # worker processes alive at once, ERM's included

    def __post_init__(self) -> None:
        if "ERM" not in self.algorithms:
            raise ValueError("the cost table is relative to ERM: include 'ERM' in algorithms")
        if self.group_size < 2:
            raise ValueError(f"group_size counts ERM's worker too: need >= 2, got {self.group_size}")
        if self.steps < MIN_ROUNDS or self.warmup < MIN_WARMUP:
            raise ValueError(f"need steps >= {MIN_ROUNDS} timed steps (for a median and its spread) and warmup >= "
                             f"{MIN_WARMUP}, got steps={self.steps}, warmup={self.warmup}")


@dataclass(frozen=True)
class LayerBenchConfig(_OnDevice):
    """`dgmoe bench layer`: the MoE layer's forward+backward against its limit (`dgmoe.bench.layer`)."""

    tokens: int = setting(32 * 197, "Tokens per call (a ViT-S/16 batch of 32 at 224 px).", minimum=1)
    dim: int = setting(384, "Token width.", minimum=1)
    experts: int = setting(6, "Experts.", minimum=1)
    top_k: int = setting(2, "Experts per token.", minimum=1)
    router: str = setting("cosine", "Router.", choices=("cosine", "linear"))
    rounds: int = setting(7, _ROUNDS, minimum=MIN_ROUNDS)
    threads: int | None = setting(None, "torch threads [torch's default].", minimum=1)
    device: str = device_setting()
    precision: str = precision_setting("fp32, tf32 (TF32 matmuls, CUDA only) or bf16: every candidate runs under "
                                       "bf16 autocast (the router stays fp32).")
    repeats: int = setting(3, "Fresh processes to repeat the measurement in; ratios are their median (min, max).",
                           minimum=1)
    paths: tuple[str, ...] | None = setting(None, "Comma list of candidates to time (default: all), e.g. 'moe "
                                                  "grouped (default),router alone' (names as printed).",
                                            parser=comma_names)


@dataclass(frozen=True)
class ModelBenchConfig(_OnDevice):
    """`dgmoe bench models`: train step, inference, memory, params and FLOPs of whole models
    (`dgmoe.bench.models`); the first model is the reference."""

    models: tuple[str, ...] = setting(DEFAULT_MODELS, "Comma list; the first is the reference.", parser=model_names)
    img_size: int = setting(224, "Image size in pixels.", minimum=1)
    batch_size: int = setting(32, "Images per step.", minimum=1)
    num_classes: int = setting(7, "Classes of the head.", minimum=1)
    rounds: int = setting(5, _ROUNDS, minimum=MIN_ROUNDS)
    device: str = device_setting()
    precision: str = precision_setting()
    compile: bool = setting(False, "torch.compile every model block by block, as `dgmoe train --compile`.",
                            flags=("--compile",))
    compile_mode: str = compile_mode_setting()
    model_kwargs: dict[str, Any] = setting({}, "create_model overrides per model as a JSON object, e.g. "
                                               "'{\"gmoe_small_patch16_224\": {\"top_k\": 1}}'.")
    fused_optimizer: bool = setting(False, "Adam steps in torch's fused kernel, as `dgmoe train --fused-optimizer`.",
                                    flags=("--fused-optimizer",))
    threads: int | None = setting(None, "torch threads [torch's default].", minimum=1)
    repeats: int = setting(1, "Fresh processes to repeat the timings in; ratios are their median.", minimum=1)


@dataclass(frozen=True)
class MemoryBenchConfig(_OnDevice):
    """`dgmoe bench memory`: peak training memory per model and batch size (`dgmoe.bench.models`)."""

    models: tuple[str, ...] = setting(("vit_small_patch16_224", "gmoe_small_patch16_224"),
                                      "Comma list; the first is the reference.", parser=model_names)
    batch_sizes: tuple[int, ...] = setting((16, 32, 96), "Comma list. 96 is DomainBed's step (32 images x 3 "
                                                         "training domains).", parser=comma_ints, minimum=1)
    img_size: int = setting(224, "Image size in pixels.", minimum=1)
    device: str = device_setting()
    precision: str = precision_setting()
    threads: int | None = setting(None, "torch threads [torch's default].", minimum=1)

    def models_config(self) -> ModelBenchConfig:
        return ModelBenchConfig(self.models, self.img_size, device=self.device, precision=self.precision,
                                threads=self.threads)


@dataclass(frozen=True)
class SyncBenchConfig(_OnDevice):
    """`dgmoe bench syncs`: host synchronisations per training step of whole models (`dgmoe.bench.syncs`)."""

    models: tuple[str, ...] = setting(("gmoe_small_patch16_224", "sfmoe_small_patch16_224", "moge_small_patch16_224"),
                                      "Comma list of models.", parser=comma_names)
    precisions: tuple[str, ...] = setting(("fp32", "tf32"), "Comma list of precisions (fp32, tf32, bf16).",
                                          parser=comma_names, choices=PRECISIONS)
    img_size: int = setting(224, "Image size in pixels.", minimum=1)
    batch_size: int = setting(96, "Images per step (96: DomainBed's 32 x 3 training domains).", minimum=1)
    steps: int = setting(2, "Steps counted, after a first one.", minimum=1)
    device: str = device_setting()
    compile: bool = setting(False, "torch.compile every model block by block, as `dgmoe train --compile`.",
                            flags=("--compile",))

    @property
    def precision(self) -> str:
        """The precision `_OnDevice` checks: tf32 when any asked for is (refused off CUDA)."""
        return "tf32" if "tf32" in self.precisions else self.precisions[0]


@dataclass(frozen=True)
class StemBenchConfig(Settings):
    """`dgmoe bench stem`: the hybrid R26 stem against timm's (`dgmoe.bench.stem`)."""

    img_size: int = setting(32, "Image size in pixels.", minimum=1)
    batch_size: int = setting(32, "Images per call.", minimum=1)
    rounds: int = setting(7, _ROUNDS, minimum=MIN_ROUNDS)
    threads: int | None = setting(None, "torch threads [torch's default].", minimum=1)
    reference: str = setting("auto", "The reference stem: timm's (needs the timm extra); auto and timm are the same "
                                     "since dgmoe's former formulation was retired.", choices=("auto", "timm"),
                             deprecated={"previous": ("timm", "dgmoe's former stem formulation was retired in 0.3.0, "
                                                              "so the reference is timm's stem")})


@dataclass(frozen=True)
class DataBenchConfig(Settings):
    """`dgmoe bench data`: loader throughput per worker count beside the model step (`dgmoe.bench.data`)."""

    workers: tuple[int, ...] = setting((0, 2, 4, 8), "Comma list of loader worker counts to measure.",
                                       parser=comma_ints, minimum=0)
    steps: int = setting(20, "Steps timed per measurement, after --warmup steps.", minimum=1, flags=("--timed-steps",))
    warmup: int = setting(3, "Untimed steps before each measurement.", minimum=0)


@dataclass(frozen=True)
class AlgorithmBenchConfig(_OnDevice):
    """`dgmoe algorithms bench`: one `BenchmarkConfig` per backbone (whose defaults these are)."""

    backbones: tuple[str, ...] = setting(("vit_tiny_patch16_224", "gmoe_tiny_patch16_224"), "Registered model name; "
                                         "repeat for several tables.", flags=("--backbone",))
    algorithms: str = setting("all", "Comma-separated algorithm names (must include ERM), or 'all': every registered "
                                     "algorithm (those that cannot train the backbone are listed with the reason).")
    steps: int = setting(BenchmarkConfig.steps, f"Timed steps per algorithm (at least {MIN_ROUNDS}; an even number "
                                                "averages DANN's alternation).", minimum=MIN_ROUNDS)
    warmup: int = setting(BenchmarkConfig.warmup, "Untimed warm-up steps per algorithm.", minimum=MIN_WARMUP)
    domains: int = setting(BenchmarkConfig.domains, "Training domains of the batch.", minimum=1)
    batch_per_domain: int = setting(BenchmarkConfig.batch_per_domain, "Images per domain per step.", minimum=1)
    img_size: int = setting(BenchmarkConfig.img_size, "Image size in pixels.", minimum=1)
    patch_size: int | None = setting(BenchmarkConfig.patch_size, "ViT patch size in pixels.", minimum=1)
    threads: int = setting(BenchmarkConfig.threads, "torch threads per worker process.", minimum=1)
    device: str = device_setting()
    group_size: int = setting(BenchmarkConfig.group_size, "Worker processes alive at once (ERM's included); each "
                                                          "holds a backbone, so this bounds memory.", minimum=2)
