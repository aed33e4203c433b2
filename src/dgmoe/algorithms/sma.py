"""Simple moving average of the weights, SMA, and the ensemble of averages, EoA (Arpit et al., NeurIPS 2022).

SMA trains as ERM and evaluates the running mean of the weights from iteration t0 = `sma_start_iter` on
(Sec. 3): theta_hat_t = theta_t for t <= t0, else ((t - t0) theta_hat_{t-1} + theta_t) / (t - t0 + 1).
DomainBed calls it ERM_SMA. EoA ensembles several independently trained SMA models;
`EnsembleOfAverages` averages their logits (the official code sums them: the same argmax;
`combine='probs'` averages softmax probabilities instead).
"""
from __future__ import annotations

from typing import Literal, Sequence, cast

import torch
import torch.nn as nn

from dgmoe.algorithms.averaging import averaged_tensors, copy_integer_buffers, running_mean_
from dgmoe.algorithms.base import Algorithm, Metrics, frozen_copy
from dgmoe.algorithms.erm import ERM
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, fixed, non_negative


@register_algorithm
class SMA(ERM):
    DESCRIPTION = "ERM evaluated with a simple moving average of the weights (ERM_SMA; combine runs with EoA)"
    REFERENCE = ("Arpit et al., Ensemble of Averages: Improving Model Selection and Boosting Performance in DG, "
                 "NeurIPS 2022")
    HPARAMS = {"sma_start_iter": HParam(100, fixed(100), non_negative)}

    # buffers, registered in __init__
    sma_count: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.network_sma = frozen_copy(network)
        self.count_updates()
        self.register_buffer("sma_count", torch.zeros((), dtype=torch.long))

    def train(self, mode: bool = True) -> "SMA":
        super().train(mode)
        self.network_sma.eval()  # only ever evaluated
        return self

    @torch.no_grad()
    def update_average(self) -> None:
        self.update_count += 1
        current = averaged_tensors(self.network)
        average = averaged_tensors(self.network_sma)
        if int(self.update_count) <= self.hparams["sma_start_iter"]:
            torch._foreach_copy_(average, current)
            self.sma_count.fill_(1)
        else:
            self.sma_count += 1
            running_mean_(average, current, int(self.sma_count))
        copy_integer_buffers(self.network, self.network_sma)

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        out = super()._update(minibatches, step)
        self.update_average()
        return out

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.logits(x, meta, self.network_sma)

    def inference_network(self) -> nn.Module:
        return self.network_sma


class EnsembleOfAverages(nn.Module):
    """EoA: the ensemble of trained algorithms' `predict` (usually SMA runs with different seeds), in float32;
    also `dgmoe soup`'s output ensemble of a sweep's runs (DiWA's ENS)."""

    def __init__(self, members: Sequence[Algorithm], combine: Literal["logits", "probs"] = "logits"):
        super().__init__()
        if not members:
            raise ValueError("EnsembleOfAverages needs at least one trained model")
        if combine not in ("logits", "probs"):
            raise ValueError(f"combine must be 'logits' or 'probs', got {combine!r}")
        self.members = nn.ModuleList(members)
        self.combine = combine

    @torch.no_grad()
    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        outs = [cast(Algorithm, m).predict(x, meta).float() for m in self.members]
        if self.combine == "probs":
            outs = [o.softmax(-1) for o in outs]
        return torch.stack(outs).mean(0)
