"""Whole-model cost (GMoE Table 16, SF-MoE Table 4): train step, inference, peak memory, params, FLOPs.

Times are medians of interleaved rounds in one process, reported as ratios to the first model. Peak
memory is measured per model in a fresh subprocess (CUDA: `max_memory_allocated`; CPU: resident set size
after two training steps minus the size before the model was built, with glibc told not to return freed
memory, so the figure is the step's high-water mark of weights, optimiser state and activations).
The compute floor of a model is the reference's step time scaled by the ratio of their training FLOPs.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from dgmoe.bench.timing import interleaved_medians, tune_malloc
from dgmoe.models import count_parameters, create_model

DEFAULT_MODELS = ("vit_small_patch16_224", "gmoe_small_patch16_224", "sfmoe_small_patch16_224", "moge_small_patch16_224",
                  "resnet50")


@dataclass(frozen=True)
class ModelBenchConfig:
    models: tuple[str, ...] = DEFAULT_MODELS
    img_size: int = 224
    batch_size: int = 32
    num_classes: int = 7
    rounds: int = 5
    device: str = "cpu"
    precision: str = "fp32"
    compile: bool = False
    threads: int | None = None


def _inputs(model, cfg: ModelBenchConfig):
    x = torch.randn(cfg.batch_size, 3, cfg.img_size, cfg.img_size, device=cfg.device)
    y = torch.randint(cfg.num_classes, (cfg.batch_size,), device=cfg.device)
    kwargs = {}
    if getattr(model, "uses_metadata", False):
        g = torch.Generator().manual_seed(0)
        kwargs["meta"] = {"lat": (torch.rand(cfg.batch_size, generator=g) * 180 - 90).to(cfg.device),
                          "lon": (torch.rand(cfg.batch_size, generator=g) * 360 - 180).to(cfg.device)}
    return x, y, kwargs


def _build(name: str, cfg: ModelBenchConfig):
    model = create_model(name, num_classes=cfg.num_classes, img_size=cfg.img_size).to(cfg.device)
    return torch.compile(model) if cfg.compile else model


def _steps(model, cfg: ModelBenchConfig):
    x, y, kw = _inputs(model, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    amp = torch.autocast(device_type=cfg.device.split(":")[0], dtype=torch.bfloat16, enabled=cfg.precision == "bf16")
    sync = torch.cuda.synchronize if cfg.device.startswith("cuda") else (lambda: None)

    def train_step() -> None:
        model.train()
        with amp:
            loss = F.cross_entropy(model.forward_head(model.forward_features(x, **kw)).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()

    @torch.no_grad()
    def infer() -> None:
        model.eval()
        with amp:
            model.forward_head(model.forward_features(x, **kw))
        sync()

    return train_step, infer


def training_flops(name: str, cfg: ModelBenchConfig) -> tuple[int, int]:
    """(parameters, forward FLOPs per image) of a model, counted by torch's FlopCounterMode."""
    model = create_model(name, num_classes=cfg.num_classes, img_size=cfg.img_size).eval()
    one = ModelBenchConfig(**{**asdict(cfg), "batch_size": 1, "device": "cpu"})
    x, _, kw = _inputs(model, one)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.forward_head(model.forward_features(x, **kw))
    return count_parameters(model), counter.get_total_flops()


def peak_memory_gb(name: str, cfg: ModelBenchConfig) -> float:
    """Peak memory of two training steps of `name`, measured in a fresh process."""
    payload = json.dumps({"name": name, "cfg": asdict(cfg)})
    out = subprocess.run([sys.executable, "-m", "dgmoe.bench.models", payload], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _current_rss_gb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**30


def _measure_memory_child(payload: str) -> None:
    spec = json.loads(payload)
    cfg = ModelBenchConfig(**{**spec["cfg"], "models": tuple(spec["cfg"]["models"])})
    tune_malloc()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    before = _current_rss_gb()
    model = _build(spec["name"], cfg)
    train_step, _ = _steps(model, cfg)
    for _ in range(2):
        train_step()
    if cfg.device.startswith("cuda"):
        print(torch.cuda.max_memory_allocated() / 2**30)
    else:
        print(_current_rss_gb() - before)


def bench_models(cfg: ModelBenchConfig) -> list[dict]:
    tune_malloc()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    models = {name: _build(name, cfg) for name in cfg.models}
    steps = {name: _steps(m, cfg) for name, m in models.items()}
    train = interleaved_medians({n: s[0] for n, s in steps.items()}, rounds=cfg.rounds)
    infer = interleaved_medians({n: s[1] for n, s in steps.items()}, rounds=cfg.rounds)
    del models, steps
    ref = cfg.models[0]
    counts = {n: training_flops(n, cfg) for n in cfg.models}
    memory = {n: peak_memory_gb(n, cfg) for n in cfg.models}
    rows = []
    for n in cfg.models:
        floor = train[ref] * counts[n][1] / counts[ref][1]
        rows.append({"model": n, "params (M)": counts[n][0] / 1e6, "GFLOPs/img (fwd)": counts[n][1] / 1e9,
                     "train step (s)": train[n], "train vs ref": train[n] / train[ref],
                     "train vs compute floor": train[n] / floor, "inference (s)": infer[n],
                     "inference vs ref": infer[n] / infer[ref], "peak mem (GB)": memory[n],
                     "mem vs ref": memory[n] / memory[ref]})
    return rows


if __name__ == "__main__":
    _measure_memory_child(sys.argv[1])
