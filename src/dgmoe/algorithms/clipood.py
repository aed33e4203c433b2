"""CLIPood (Shu et al., "CLIPood: Generalizing CLIP to Out-of-Distributions", ICML 2023), as thuml/CLIPood's
`engine.train` and `GeneralMovingAverage` compute it.

- **Margin metric softmax** (Sec. 4.1, Eq. 4): with f the normalised image feature and t_c the class-name text
  embeddings (normalised), the logits are tau * (<f, t_c> - lambda <t_y, t_c>): every class is pulled towards the
  label's text embedding by its semantic similarity to it; cross-entropy on these. tau is CLIP's
  exp(logit_scale) (the authors' default temperature), lambda `clipood_lambda` (their default 0.3). The text
  embeddings are the run's zero-shot head (`--head zeroshot`, `dgmoe.models.clip.zero_shot.TextHead`: weight = tau
  t_c), kept frozen: CLIPood trains the image tower alone.
- **Beta moving average** (Sec. 4.2, Eq. 6): the evaluated weights are the average of theta_0 (the start), ...,
  theta_T weighted by w_i = Beta(alpha, alpha) density at (i + 0.5) / (T + 1) (`clipood_beta` alpha, their
  default 0.5; T the run's number of updates, `--steps` or the catalogue's: handed over by the run,
  `attach_run`), accumulated online as their code does:
  theta_bar <- (theta_bar + r theta_i) / (1 + r), r = w_i / (w_0 + ... + w_{i-1}). Over the parameters, as theirs
  (buffers are the trained network's).
- **Frozen normalisation**: their training loop runs the network in eval mode ("Freeze all Norm Layers"), so no
  dropout or drop path; dgmoe's CLIPood does the same.

Deliberate differences: their AdamW (lr 5e-6, weight decay 0.1) with a cosine schedule is DomainBed's Adam here
with the run's `lr` and `weight_decay`. Since the Beta weights of the first updates depend on the run's length, a
CLIPood run cannot be extended (`--extend` is refused); a killed run resumes exactly. Checked against the
authors' code: the moving average by a fixture recorded from their `GeneralMovingAverage` (tests/parity), the
loss by its equation.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.base import (
    Algorithm,
    Metrics,
    RunContext,
    concat_batches,
    cross_entropy,
    detached,
    frozen_copy,
)
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.errors import UsageError
from dgmoe.hparams import HParam, fixed


def beta_weight(i: int, total: int, alpha: float) -> float:
    """The Beta(alpha, alpha) density at (i + 0.5) / (total + 1): the weight of theta_i (CLIPood Eq. 6)."""
    x = (i + 0.5) / (total + 1)
    log_b = 2 * math.lgamma(alpha) - math.lgamma(2 * alpha)
    return math.exp((alpha - 1) * (math.log(x) + math.log1p(-x)) - log_b)


@torch.no_grad()
def beta_average_step_(average: list[torch.Tensor], current: list[torch.Tensor], weight: float,
                       weight_sum: float) -> None:
    """One step of the online weighted mean (thuml/CLIPood `GeneralMovingAverage.update`): with r = weight /
    weight_sum (the weights so far), average <- (average + r current) / (1 + r), in place."""
    ratio = weight / weight_sum
    for avg, param in zip(average, current):
        avg.copy_((avg + ratio * param) / (1 + ratio))


def margin_logits(features: torch.Tensor, text: torch.Tensor, y: torch.Tensor, scale: torch.Tensor | float,
                  margin: float) -> torch.Tensor:
    """tau * (<f/|f|, t_c> - lambda <t_y, t_c>) for every class c (CLIPood Eq. 4); `text` rows normalised."""
    f = F.normalize(features, dim=-1) - margin * text[y]
    return scale * (f @ text.T)


@register_algorithm
class CLIPood(Algorithm):
    DESCRIPTION = "CLIPood: margin metric softmax against class-name text embeddings, Beta moving average"
    REFERENCE = "Shu et al., CLIPood: Generalizing CLIP to Out-of-Distributions, ICML 2023"
    NEEDS_TEXT_HEAD = True
    HPARAMS = {
        "clipood_lambda": HParam(0.3, fixed(0.3)),
        "clipood_beta": HParam(0.5, fixed(0.5)),
    }
    LENGTH_BOUND = "weighs every update by the run's length"

    # buffers, registered in __init__
    text: torch.Tensor
    scale: torch.Tensor
    bma_count: torch.Tensor
    bma_weight_sum: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        from dgmoe.models.clip.zero_shot import TextHead

        head = network.get_classifier()
        if not isinstance(head, TextHead):
            raise UsageError("CLIPood needs the class names' text embeddings as its head: train with --head zeroshot "
                             "on a CLIP image tower")
        head.requires_grad_(False)  # the text embeddings stay CLIP's
        super().__init__(network, num_classes, num_domains, hparams)
        with torch.no_grad():
            scale = head.weight.norm(dim=1, keepdim=True)  # the zero-shot head's rows are tau * t_c
            self.register_buffer("text", (head.weight / scale).detach().clone())
            self.register_buffer("scale", scale.mean().detach().clone())
        self.network_bma = frozen_copy(network).eval()
        self.register_buffer("bma_count", torch.zeros((), dtype=torch.long))
        self.register_buffer("bma_weight_sum", torch.zeros((), dtype=torch.float64))  # w_0, once T is known
        self.total_steps: int | None = None

    def attach_run(self, run: RunContext) -> None:
        """T of Eq. 6, the run's number of updates; before the first update (a resume then loads its sums)."""
        if int(self.bma_count):
            raise RuntimeError("CLIPood's step count is set before its first update")
        self.total_steps = int(run.n_steps)
        self.bma_weight_sum.fill_(self._weight(0))

    def _weight(self, i: int) -> float:
        if self.total_steps is None:
            raise RuntimeError("CLIPood's Beta weights need the run's step count: call attach_run(RunContext("
                               "n_steps)) (the run does, from --steps)")
        return beta_weight(i, self.total_steps, float(self.hparams["clipood_beta"]))

    def train(self, mode: bool = True) -> "CLIPood":
        super().train(mode)
        self.network.eval()  # CLIPood trains with normalisation layers (and dropout) in eval mode
        self.network_bma.eval()
        return self

    @torch.no_grad()
    def update_average(self) -> None:
        self.bma_count += 1
        weight = self._weight(int(self.bma_count))
        beta_average_step_(list(self.network_bma.parameters()), list(self.network.parameters()), weight,
                           float(self.bma_weight_sum))
        self.bma_weight_sum += weight

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        batch = concat_batches(minibatches)
        logits = margin_logits(self.features(batch), self.text, batch.y, self.scale, self.hparams["clipood_lambda"])
        task = cross_entropy(logits, batch.y)
        aux = self.moe_aux_loss()
        self.step(task + aux)
        self.update_average()
        return detached(loss=task + aux, loss_task=task, loss_aux=aux)

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.logits(x, meta, self.network_bma)

    def inference_network(self) -> nn.Module:
        return self.network_bma
