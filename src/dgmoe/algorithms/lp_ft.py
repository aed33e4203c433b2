"""LP-FT (Kumar et al., "Fine-Tuning can Distort Pretrained Features and Underperform Out-of-Distribution", ICLR
2022, Sec. 4): first a linear probe, then fine-tuning from the probed head, in one run.

- **Linear probe**: the first `linear_steps` updates train only the classifier, with its own Adam (`linear_lr`,
  the shared weight decay), on features computed without a graph (the backbone is not updated; it runs in
  training mode, as ERM++'s warm-up does).
- **Fine-tuning**: every later update trains what the run trains (the whole network, or under `--peft` its
  trainable parameters and the head) with the shared Adam (`lr`), from the probed head; cross-entropy plus
  the MoE auxiliary loss, as ERM.

The head the probe starts from is the network's (random, or text-initialised where the run asks for it).
Deliberate differences from the paper: Kumar et al. fit the probe by L-BFGS logistic regression to convergence
and fine-tune with SGD; dgmoe probes with `linear_steps` Adam updates and fine-tunes with DomainBed's Adam.

- `linear_steps` (500, ERM++'s warm-up length, DomainBed's `ERMPlusPlus`): the probe's updates, at least 1, and
  fewer than the run's steps: a run whose probe is empty (ERM; `at_least_one`) or covers every step (a linear
  probe; `dgmoe.engine.combinations`) is refused, as are `--steps 0` and `--peft linear`. The run prints its
  phase plan when it starts, and each record says the phase of the update before it (`lp_ft_phase`: 'linear
  probe' or 'fine-tune').
- `linear_lr` (1e-3, 10^U(-4, -2) in a random search): the paper's probe has no learning rate (L-BFGS to
  convergence); dgmoe's Adam probe takes the rate its recipes train a linear probe on a frozen tower with
  (`dgmoe.recipes.robust_ft`'s linear probe and LP-FT parts), not ERM++'s 5e-5: Adam moves a weight by about
  its learning rate per update, so 500 updates at 5e-5 move each head weight by at most ~0.025, a warm-up
  rather than a probe fitted to convergence.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from dgmoe.algorithms.base import Algorithm, Metrics, concat_batches, detached
from dgmoe.algorithms.erm_plus_plus import ERMPlusPlus, probe_or_tune
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform, positive


def at_least_one(value) -> str | None:
    """LP-FT's probe makes at least one update (0 or less would be ERM from the initial head)."""
    return None if value >= 1 else "must be >= 1 for LPFT (0 or less skips the linear probe: that is ERM)"


@register_algorithm
class LPFT(Algorithm):
    DESCRIPTION = "LP-FT: a linear probe of the head, then fine-tuning (full or --peft) from the probed head"
    REFERENCE = ("Kumar et al., Fine-Tuning can Distort Pretrained Features and Underperform Out-of-Distribution, "
                 "ICLR 2022")
    HPARAMS = {
        "linear_lr": HParam(1e-3, log_uniform(-4, -2), positive),
        "linear_steps": dataclasses.replace(ERMPlusPlus.HPARAMS["linear_steps"], check=at_least_one),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.linear_optimizer = torch.optim.Adam(self.classifier().parameters(), lr=self.hparams["linear_lr"],
                                                 weight_decay=self.hparams["weight_decay"])
        self.count_updates()

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "linear_optimizer": self.linear_optimizer}

    @property
    def probing(self) -> bool:
        """Whether the next update is one of the linear probe's."""
        return int(self.update_count) < self.hparams["linear_steps"]

    def phase_plan(self, n_steps: int) -> str:
        n = int(self.hparams["linear_steps"])
        return f"LP-FT: linear probe of the head for steps 0-{n - 1}, then fine-tuning for steps {n}-{n_steps - 1}"

    def checkpoint_record(self) -> dict[str, Any]:
        """The phase of the last update: 'linear probe' or 'fine-tune'."""
        probed = int(self.update_count) <= self.hparams["linear_steps"]
        return {"lp_ft_phase": "linear probe" if probed else "fine-tune"}

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        batch = concat_batches(minibatches)
        probing = self.probing
        task, aux = probe_or_tune(self, batch, probing)
        self.update_count += 1
        return {**detached(loss=task + aux, loss_task=task, loss_aux=aux), "linear_probe": float(probing)}

