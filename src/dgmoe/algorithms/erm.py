"""Empirical risk minimisation (Vapnik, 1998): the GMoE paper's main setting."""
from __future__ import annotations

from dgmoe.algorithms.base import Algorithm, Metrics, concat_batches, cross_entropy, detached
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch


@register_algorithm
class ERM(Algorithm):
    DESCRIPTION = "Empirical risk minimisation over the pooled training domains"
    REFERENCE = "Vapnik, Statistical Learning Theory, 1998; the GMoE paper (Li et al., ICLR 2023) trains GMoE with ERM"

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        batch = concat_batches(minibatches)
        task = cross_entropy(self.logits(batch), batch.y)
        aux = self.moe_aux_loss()
        self.step(task + aux)
        return detached(loss=task + aux, loss_task=task, loss_aux=aux)
