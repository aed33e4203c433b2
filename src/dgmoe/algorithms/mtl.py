"""Marginal transfer learning, MTL (Blanchard et al., JMLR 2021), the neural-network version of DomainBed.

The classifier reads the pooled feature together with an embedding of the domain's marginal distribution,
the mean of the domain's features (the kernel mean embedding of the paper's Sec. 3 with the feature map as
kernel): logits = W [z; mu_e] + b. During training mu_e = ema * mean(z over the minibatch) + (1 - ema) *
m_e, with m_e a stored per-domain moving average (a buffer, updated to mu_e without gradient); the current
minibatch's mean carries gradient. At prediction the embedding is the mean feature of the batch being
predicted (the test domain's sample, as the paper). The loss is the sum over domains of their
cross-entropies (DomainBed). Per-domain forwards for BatchNorm backbones, as DomainBed; under multi-process
training the means are the whole minibatches'.

`mtl_embedding='features'` is the method above (dgmoe's named variant). The default, `'noise'`, is DomainBed
b93c22a's behaviour: its `predict` overwrites the embedding in place with standard normal noise
(`.normal_()`, DomainBed issue #159), so the classifier reads [z; N(0, 1) noise] in training and at
prediction, and the stored means are updated but never used (every prediction is random, and evaluation
draws from the training random stream). The backbone's own head is not used: MTL has its classifier on
2 x num_features inputs, saved with the algorithm's state (the run's model file holds the backbone).
"""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn

from dgmoe.algorithms.base import Algorithm, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, choice, fixed
from dgmoe.sharding import Shard, global_mean, per_sample, use_shard


@register_algorithm
class MTL(Algorithm):
    DESCRIPTION = ("Marginal transfer learning: the classifier also reads an embedding of the domain's feature "
                   "distribution")
    REFERENCE = "Blanchard et al., Domain Generalization by Marginal Transfer Learning, JMLR 2021"
    HPARAMS = {
        "mtl_ema": HParam(0.99, choice([0.5, 0.9, 0.99, 1.0])),
        "mtl_embedding": HParam("noise", fixed("noise")),
    }

    # buffers, registered in __init__
    embeddings: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        if self.hparams["mtl_embedding"] not in ("features", "noise"):
            raise ValueError(f"mtl_embedding must be 'features' or 'noise', got {self.hparams['mtl_embedding']!r}")
        dim = network.num_features
        self.mtl_classifier = nn.Linear(2 * dim, num_classes)
        self.register_buffer("embeddings", torch.zeros(num_domains, dim))
        head = {id(p) for p in self.classifier().parameters()}
        backbone = [p for p in network.parameters() if id(p) not in head]
        self.optimizer = self.make_optimizer(backbone + list(self.mtl_classifier.parameters()))

    def embedding(self, z: torch.Tensor, domain: int | None = None, shard: Shard | None = None) -> torch.Tensor:
        """[len(z), dim]: the marginal embedding each sample is classified with (updates the domain's
        moving average when `domain` is given)."""
        mean = global_mean(z, shard)
        if domain is not None:
            ema = self.hparams["mtl_ema"]
            mean = ema * mean + (1 - ema) * self.embeddings[domain]
            self.embeddings[domain] = mean.detach()
        if self.hparams["mtl_embedding"] == "noise":
            with use_shard(shard):  # every sample gets its own noise, the same under any process count
                return per_sample(tuple(z.shape), lambda t: t.normal_(), like=z)
        return mean.unsqueeze(0).expand(len(z), -1)

    def mtl_logits(self, z: torch.Tensor, domain: int | None = None, shard: Shard | None = None) -> torch.Tensor:
        return self.mtl_classifier(torch.cat([z, self.embedding(z, domain, shard)], dim=1))

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        features = self.domain_features(minibatches)
        task = cast(torch.Tensor, sum(cross_entropy(self.mtl_logits(z, e, b.shard), b.y)
                                      for e, (z, b) in enumerate(zip(features, minibatches))))
        aux = self.moe_aux_loss()
        self.step(task + aux)
        return {"loss": (task + aux).item(), "loss_task": task.item(), "loss_aux": aux.item()}

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.mtl_logits(self.features(x, meta))

    def predict_online(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.predict(x, meta)
