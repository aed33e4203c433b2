"""ERM++ (Teterwak et al., WACV 2025, arXiv:2304.01973), as DomainBed's `ERMPlusPlus` trains it in `train.py`
(the paper's section numbers were not checked here).

ERM with two of the paper's training-procedure changes:

- **Linear probing first** (the paper's warm start): for the first `linear_steps` + 1 updates (DomainBed:
  while its iteration counter is <= `linear_steps`) only the classifier is trained, with its own Adam
  (`linear_lr`, the shared weight decay); the backbone runs in training mode but is not updated. Then the
  whole network is trained with the shared Adam (`lr`).
- **Weight averaging** (SMA, Arpit et al.): after update t, the evaluated copy is theta_t while
  t < s = `ermpp_sma_start_iter` (600, a constant in DomainBed), then the running mean of theta_{s-1}, ...,
  theta_t (every floating-point entry of the state dict, BatchNorm statistics included; integer counters are
  the copy's own). On backbones with BatchNorm (not frozen), the averaged copy then runs one forward in
  training mode on the update's batch, which moves its running statistics towards the current batch, as
  DomainBed does. `predict` evaluates the averaged copy.

Not included: DomainBed's `lars` option (fixed False there; no LARS optimiser in dgmoe) and the automatic
learning-rate schedule of DomainBed's separate `train_autolr.py` (ReduceLROnPlateau on the averaged model's
validation loss, then a second full-data run with that schedule): `train.py`, the DomainBed path dgmoe
follows, does not call it. The paper's other changes (stronger initialisations, more data, longer training)
are choices of backbone, data and steps.

Any backbone. The MoE auxiliary loss is added on full-network updates (linear-probe updates do not change
the backbone, whose features are then computed without a graph).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from dgmoe.algorithms.averaging import averaged_tensors, running_mean_
from dgmoe.algorithms.base import Algorithm, concat_batches, cross_entropy, frozen_copy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, fixed, log_uniform


@register_algorithm
class ERMPlusPlus(Algorithm):
    DESCRIPTION = "ERM++: linear-probe warm-up, then full fine-tuning, evaluated with a moving average of the weights"
    REFERENCE = "Teterwak et al., ERM++: An Improved Baseline for Domain Generalization, WACV 2025"
    HPARAMS = {
        "linear_lr": HParam(5e-5, log_uniform(-5, -3.5)),
        "linear_steps": HParam(500, fixed(500)),
        "ermpp_sma_start_iter": HParam(600, fixed(600)),
    }

    # buffers, registered in __init__
    sma_count: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.linear_optimizer = torch.optim.Adam(self.classifier().parameters(), lr=self.hparams["linear_lr"],
                                                 weight_decay=self.hparams["weight_decay"])
        self.network_sma = frozen_copy(network).eval()
        self.refresh_batch_norm = self.per_domain_forward and not getattr(network, "freeze_bn", False)
        self.count_updates()
        self.register_buffer("sma_count", torch.zeros((), dtype=torch.long))

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "linear_optimizer": self.linear_optimizer}

    def train(self, mode: bool = True) -> "ERMPlusPlus":
        super().train(mode)
        self.network_sma.eval()  # evaluated only (its BatchNorm refresh switches it to training mode briefly)
        return self

    @property
    def linear_probing(self) -> bool:
        return int(self.update_count) <= self.hparams["linear_steps"]

    @torch.no_grad()
    def update_average(self) -> None:
        self.update_count += 1
        current, average = averaged_tensors(self.network), averaged_tensors(self.network_sma)
        if int(self.update_count) >= self.hparams["ermpp_sma_start_iter"]:
            self.sma_count += 1
            running_mean_(average, current, int(self.sma_count) + 1)
        else:
            torch._foreach_copy_(average, current)

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        batch = concat_batches(minibatches)
        linear = self.linear_probing
        task, aux = probe_or_tune(self, batch, linear)
        self.update_average()
        if self.refresh_batch_norm:
            with torch.no_grad():
                self.network_sma.train()
                self.features(batch, network=self.network_sma)
                self.network_sma.eval()
        return {"loss": (task + aux).item(), "loss_task": task.item(), "loss_aux": aux.item(),
                "linear_probe": float(linear)}

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.logits(x, meta, self.network_sma)

    def inference_network(self) -> nn.Module:
        return self.network_sma


def probe_or_tune(algorithm: Algorithm, batch: Batch, probing: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One update of a probe-then-fine-tune schedule (ERM++'s linear probe, LP-FT): while `probing`, the head
    alone on frozen features with the algorithm's `linear_optimizer`; after it, the whole (trainable) network with
    its `optimizer`, MoE balance loss included. Returns (task loss, auxiliary loss)."""
    if probing:
        with torch.no_grad():
            z = algorithm.features(batch)
        task = cross_entropy(algorithm.classifier()(z), batch.y)
        aux = torch.zeros((), device=task.device)
        algorithm.step(task, getattr(algorithm, "linear_optimizer"))
    else:
        task = cross_entropy(algorithm.logits(batch), batch.y)
        aux = algorithm.moe_aux_loss()
        algorithm.step(task + aux)
    return task, aux
