"""The R26 stem of the hybrid ViT (`dgmoe.models.hybrid`) against a reference, as a ratio measured in one run.

The reference is timm's `vit_small_r26_s32_224` ResNet stem with the same weights when timm imports,
and otherwise dgmoe's stem with its previous weight standardisation (mean, biased variance, five
elementwise/reduction ops, and an explicitly padded input copy for every 'same' convolution). Both
candidates' outputs are compared before timing, so a ratio is never reported for a stem that computes
something else.
"""
from __future__ import annotations

import copy
import statistics
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from dgmoe.bench.configs import StemBenchConfig
from dgmoe.bench.timing import Spread, interleaved_times, round_ratios, size_warning, timing_warnings, tune_malloc
from dgmoe.models import create_model
from dgmoe.models.hybrid import StdConv2dSame, pad_same

MODEL = "vit_small_r26_s32_224"


def previous_forward(conv: StdConv2dSame, x: torch.Tensor) -> torch.Tensor:
    """dgmoe's StdConv2dSame.forward before the fused formulation (kept only as a benchmark reference)."""
    flat = conv.weight.reshape(conv.weight.shape[0], -1)
    w = (flat - flat.mean(1, keepdim=True)) / torch.sqrt(flat.var(1, unbiased=False, keepdim=True) + conv.eps)
    x = pad_same(x, conv.kernel_size[0], conv.stride[0])
    return F.conv2d(x, w.reshape_as(conv.weight), None, conv.stride)


def _our_stem(img_size: int) -> torch.nn.Module:
    model: Any = create_model(MODEL, num_classes=0, img_size=img_size)  # a hybrid ViT
    return model.patch_embed.backbone


def _timm_stem(ours: torch.nn.Module, img_size: int) -> torch.nn.Module:
    import timm

    ref = timm.create_model(MODEL, pretrained=False, num_classes=0, img_size=img_size)
    ref.patch_embed.backbone.load_state_dict(ours.state_dict(), strict=True)
    return ref.patch_embed.backbone


def _previous_stem(ours: torch.nn.Module) -> torch.nn.Module:
    stem = copy.deepcopy(ours)
    for module in stem.modules():
        if isinstance(module, StdConv2dSame):
            module.forward = types.MethodType(previous_forward, module)  # type: ignore[method-assign]  # this copy only
    return stem


def reference_stem(ours: torch.nn.Module, cfg: StemBenchConfig) -> tuple[str, torch.nn.Module]:
    if cfg.reference in ("auto", "timm"):
        try:
            return f"timm {__import__('timm').__version__}", _timm_stem(ours, cfg.img_size)
        except ImportError:
            if cfg.reference == "timm":
                raise
    return "dgmoe previous formulation", _previous_stem(ours)


def bench_stem(cfg: StemBenchConfig) -> tuple[list[dict], list[str]]:
    """(rows, warnings). Rows per pass (inference; forward+backward): median seconds of both stems, their
    paired ratio and its IQR over rounds; warnings as `dgmoe.bench.timing.timing_warnings` and for a stem
    pass under 1 GFLOP (too small to time reliably)."""
    tune_malloc()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    ours = _our_stem(cfg.img_size)
    name, ref = reference_stem(ours, cfg)
    x = torch.randn(cfg.batch_size, 3, cfg.img_size, cfg.img_size)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        torch.testing.assert_close(ours(x), ref(x), atol=1e-4, rtol=1e-4)
    forward_flops = counter.get_total_flops() / 2  # both stems ran once under the counter
    rows, warnings = [], []
    for kind in ("inference", "forward+backward"):
        def run(model, kind=kind):
            if kind == "inference":
                with torch.no_grad():
                    model(x)
            else:
                model.zero_grad(set_to_none=True)
                model(x).sum().backward()
        times = interleaved_times({"dgmoe": lambda: run(ours), "reference": lambda: run(ref)}, rounds=cfg.rounds)
        ratios = round_ratios(times, "reference")["dgmoe"]
        rows.append({"pass": kind, "reference": name, "dgmoe (s)": statistics.median(times["dgmoe"]),
                     "reference (s)": statistics.median(times["reference"]),
                     "dgmoe / reference": statistics.median(ratios), "IQR over rounds": Spread.of(ratios).text()})
        warnings += size_warning(f"the stem's {kind} pass (batch {cfg.batch_size} at {cfg.img_size} px)",
                                 forward_flops * (1 if kind == "inference" else 3))
        warnings += timing_warnings(f"{kind}: dgmoe vs reference", ratios, times["dgmoe"], times["reference"])
    return rows, warnings
