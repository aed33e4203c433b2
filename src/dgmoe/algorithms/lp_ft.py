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
`linear_steps` and `linear_lr` are ERM++'s (DomainBed's `ERMPlusPlus` values: 500 updates at 5e-5), whose
warm-up is the same two phases without its weight averaging (`dgmoe.algorithms.erm_plus_plus`).
"""
from __future__ import annotations

import torch

from dgmoe.algorithms.base import Algorithm, Metrics, concat_batches, detached
from dgmoe.algorithms.erm_plus_plus import ERMPlusPlus, probe_or_tune
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch


@register_algorithm
class LPFT(Algorithm):
    DESCRIPTION = "LP-FT: a linear probe of the head, then fine-tuning (full or --peft) from the probed head"
    REFERENCE = ("Kumar et al., Fine-Tuning can Distort Pretrained Features and Underperform Out-of-Distribution, "
                 "ICLR 2022")
    HPARAMS = {k: ERMPlusPlus.HPARAMS[k] for k in ("linear_lr", "linear_steps")}

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

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        batch = concat_batches(minibatches)
        probing = self.probing
        task, aux = probe_or_tune(self, batch, probing)
        self.update_count += 1
        return {**detached(loss=task + aux, loss_task=task, loss_aux=aux), "linear_probe": float(probing)}

