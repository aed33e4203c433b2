"""MIRO: mutual-information regularisation with the initial (pre-trained) model (Cha et al., ECCV 2022, eq. 8).

A frozen copy of the network at initialisation gives reference features z0 = f0(x). The objective is
CE + lambda * E[ log|Sigma| + ||z0 - mu(z)||^2_{Sigma^-1} ] / 2 with mu the identity and a diagonal,
input-independent variance Sigma = softplus(b) + 1e-5 learned per feature (initialised to 0.1), as in the
official code; the expectation is a mean over samples and feature dimensions (the normalisation the
official `ld` values were tuned with). The variance parameters use a learning rate `lr_mult` times `lr`
(default 10, the official registry's value as far as we know; not checked against its source here).

Simplification: the official code regularises several intermediate feature maps (ResNet stem and four
stages); dgmoe regularises the final pooled feature (`forward_head(pre_logits=True)`) of any backbone.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, concat_batches, cross_entropy, frozen_copy, trainable
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, choice, fixed, positive


class VarianceEncoder(nn.Module):
    """Sigma = softplus(b) + eps, one value per feature, independent of the input."""

    def __init__(self, dim: int, init: float = 0.1, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.b = nn.Parameter(torch.full((dim,), math.log(math.expm1(init - eps))))

    def forward(self) -> torch.Tensor:
        return F.softplus(self.b) + self.eps


def miro_penalty(mean: torch.Tensor, var: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over entries of ((target - mean)^2 / var + log var) / 2 (Gaussian NLL up to a constant)."""
    return ((target - mean).pow(2) / var + var.log()).mean() / 2


@register_algorithm
class MIRO(Algorithm):
    DESCRIPTION = "MIRO: keep features close to a frozen copy of the initial model via a learned-variance Gaussian"
    REFERENCE = ("Cha et al., Domain Generalization by Mutual-Information Regularization with Pre-trained Models, "
                 "ECCV 2022")
    HPARAMS = {
        "ld": HParam(0.1, choice([0.001, 0.01, 0.1, 1.0])),
        "lr_mult": HParam(10.0, fixed(10.0), positive),
    }

    # the official per-dataset lambda, 0.01 for PACS and VLCS, is declared in their catalogue entries
    # (`dgmoe.data.dataset_hparams.MIRO_SMALL_LAMBDA`)

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        self.reference = frozen_copy(network).eval()
        self.var_encoder = VarianceEncoder(network.num_features)
        lr = self.hparams["lr"]
        self.optimizer = torch.optim.Adam(
            trainable([{"params": list(self.network.parameters())},
                       {"params": list(self.var_encoder.parameters()), "lr": lr * self.hparams["lr_mult"]}]),
            lr=lr, weight_decay=self.hparams["weight_decay"])

    def train(self, mode: bool = True) -> "MIRO":
        super().train(mode)
        self.reference.eval()  # the reference model is fixed: no dropout, no gate noise, no BN updates
        return self

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        batch = concat_batches(minibatches)
        z = self.features(batch)
        task = cross_entropy(self.classifier()(z), batch.y)
        with torch.no_grad():
            z0 = self.features(batch, network=self.reference)
        reg = miro_penalty(z.float(), self.var_encoder(), z0.float())
        aux = self.moe_aux_loss()
        loss = task + self.hparams["ld"] * reg + aux
        self.step(loss)
        return {"loss": loss.item(), "loss_task": task.item(), "reg": reg.item(), "loss_aux": aux.item()}
