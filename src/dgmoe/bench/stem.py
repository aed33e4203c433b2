"""The R26 stem of the hybrid ViT (`dgmoe.models.hybrid`) against timm's `vit_small_r26_s32_224` ResNet stem
with the same weights, as a ratio measured in one run (needs the `timm` extra). Both stems' outputs are
compared before timing, so a ratio is never reported for a stem that computes something else.
"""
from __future__ import annotations

import statistics
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from dgmoe.bench.config import StemBenchConfig
from dgmoe.bench.timing import Spread, interleaved_times, round_ratios, size_warning, timing_warnings, tune_malloc
from dgmoe.errors import UsageError
from dgmoe.models import create_model

MODEL = "vit_small_r26_s32_224"


def _our_stem(img_size: int) -> torch.nn.Module:
    model: Any = create_model(MODEL, num_classes=0, img_size=img_size)  # a hybrid ViT
    return model.patch_embed.backbone


def reference_stem(ours: torch.nn.Module, cfg: StemBenchConfig) -> tuple[str, torch.nn.Module]:
    """(its name, timm's stem holding `ours`' weights); a `UsageError` when timm does not import."""
    try:
        import timm
    except ImportError as error:
        raise UsageError(f"bench stem compares with timm's stem, and timm does not import ({error}): install the "
                         "timm extra (pip install 'dgmoe[timm]')") from None
    ref = timm.create_model(MODEL, pretrained=False, num_classes=0, img_size=cfg.img_size)
    stem = ref.get_submodule("patch_embed.backbone")
    stem.load_state_dict(ours.state_dict(), strict=True)
    return f"timm {timm.__version__}", stem


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
