"""Domain-adversarial training: DANN (Ganin et al., JMLR 2016) and its class-conditional variant CDANN
(Li et al., ECCV 2018), as DomainBed implements them.

A discriminator MLP predicts the training domain from the pooled features (CDANN: features plus a learned
class embedding, with class-balanced weights). Training alternates instead of reversing gradients: of
every `d_steps_per_g_step + 1` updates, `d_steps_per_g_step` train the discriminator on its cross-entropy
plus `grad_penalty` times the squared input-gradient norm; the others train the backbone on
CE - lambda * discriminator loss. Both optimisers are Adam with betas (beta1, 0.9).

The backbone (generator) is trained with `lr_g`/`weight_decay_g`, drawn under those names as in DomainBed
(so that the same hparams_seed gives the same values) with the defaults and ranges of the shared
`lr`/`weight_decay` of the backbone family (for dense backbones these are DomainBed's). CDANN's
class-balanced discriminator loss weights a sample by 1 / (n_y K) with K the largest label in the batch
plus one, as DomainBed (`cdann_balance='domainbed'`); `'num_classes'` uses the number of classes. The MoE
auxiliary loss is added on backbone updates only: discriminator updates do not change the backbone.
"""
from __future__ import annotations

from typing import Any, Mapping, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches, cross_entropy, trainable
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import (
    DatasetHParams,
    HParam,
    choice,
    fixed,
    log_uniform,
    non_negative,
    one_of,
    positive,
    pow2_int,
    probability,
)
from dgmoe.sharding import Shard, all_reduce_sum


def discriminator_mlp(n_inputs: int, n_outputs: int, width: int, depth: int, dropout: float) -> nn.Sequential:
    """DomainBed's `networks.MLP`: depth linear layers, dropout and ReLU between them."""
    layers: list[nn.Module] = [nn.Linear(n_inputs, width), nn.Dropout(dropout), nn.ReLU()]
    for _ in range(depth - 2):
        layers += [nn.Linear(width, width), nn.Dropout(dropout), nn.ReLU()]
    layers.append(nn.Linear(width, n_outputs))
    return nn.Sequential(*layers)


def class_balanced_weights(y: torch.Tensor, num_classes: int, batch_width: bool = True,
                           shard: Shard | None = None) -> torch.Tensor:
    """1 / (count(y_i) K): each class present contributes equally (CDANN's discriminator loss). K is the
    largest label in the batch plus one (`batch_width`, DomainBed's `one_hot(y)` width) or `num_classes`.
    With a shard, the counts are the whole batch's (all processes)."""
    counts = all_reduce_sum(torch.bincount(y, minlength=num_classes), shard)
    k = int(counts.nonzero().max()) + 1 if batch_width else num_classes
    return 1.0 / (counts[y] * k).to(torch.get_default_dtype())


class AbstractDANN(Algorithm):
    MIN_TRAIN_DOMAINS = 2
    CONDITIONAL = False
    HPARAMS = {
        "lambda": HParam(1.0, log_uniform(-2, 2), non_negative),
        "weight_decay_d": HParam(0.0, log_uniform(-6, -2), non_negative),
        "d_steps_per_g_step": HParam(1, pow2_int(0, 3), positive),
        "grad_penalty": HParam(0.0, log_uniform(-2, 1), non_negative),
        "beta1": HParam(0.5, choice([0.0, 0.5]), probability),
        "mlp_width": HParam(256, pow2_int(6, 10), positive),
        "mlp_depth": HParam(3, choice([3, 4, 5]), lambda v: None if v >= 2 else "must be >= 2"),
        "mlp_dropout": HParam(0.0, choice([0.0, 0.1, 0.5]), probability),
        "lr_d": HParam(5e-5, log_uniform(-5, -3.5), positive),
    }

    @classmethod
    def hparam_specs(cls, dataset: DatasetHParams, shared: Mapping[str, HParam]) -> dict[str, HParam]:
        specs = dict(cls.HPARAMS)
        specs["lr_g"], specs["weight_decay_g"] = shared["lr"], shared["weight_decay"]
        if dataset.small_images:
            specs["lr_d"] = HParam(1e-3, log_uniform(-4.5, -2.5), positive)
        if cls.CONDITIONAL:
            specs["cdann_balance"] = HParam("domainbed", fixed("domainbed"), one_of("domainbed", "num_classes"))
        return specs

    def __init__(self, network: nn.Module, num_classes: int, num_domains: int, hparams: dict[str, Any]):
        super().__init__(network, num_classes, num_domains, hparams)
        hp = self.hparams
        dim = cast(int, network.num_features)  # timm's API
        self.discriminator = discriminator_mlp(dim, num_domains, hp["mlp_width"], hp["mlp_depth"], hp["mlp_dropout"])
        self.class_embeddings = nn.Embedding(num_classes, dim)
        disc_params = list(self.discriminator.parameters()) + list(self.class_embeddings.parameters())
        self.disc_optimizer = torch.optim.Adam(disc_params, lr=hp["lr_d"], weight_decay=hp["weight_decay_d"],
                                               betas=(hp["beta1"], 0.9))
        self.count_updates()

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        return torch.optim.Adam(trainable(params), lr=self.hparams["lr_g"], weight_decay=self.hparams["weight_decay_g"],
                                betas=(self.hparams["beta1"], 0.9))

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "discriminator": self.disc_optimizer}

    def discriminator_loss(self, z: torch.Tensor, y: torch.Tensor, domains: torch.Tensor,
                           shard: Shard | None = None) -> torch.Tensor:
        disc_input = z + self.class_embeddings(y) if self.CONDITIONAL else z
        if not disc_input.requires_grad:
            disc_input = disc_input.detach().requires_grad_(True)
        out = at_least_fp32(self.discriminator(disc_input))
        if self.CONDITIONAL:
            balance = self.hparams["cdann_balance"]
            if balance not in ("domainbed", "num_classes"):
                raise ValueError(f"cdann_balance must be 'domainbed' or 'num_classes', got {balance!r}")
            weights = class_balanced_weights(y, self.num_classes, balance == "domainbed", shard)
            loss = all_reduce_sum((weights * F.cross_entropy(out, domains, reduction="none")).sum(), shard)
        else:
            loss = F.cross_entropy(out, domains)
        if self.hparams["grad_penalty"] > 0:
            (grad,) = torch.autograd.grad(F.cross_entropy(out, domains, reduction="sum"), [disc_input],
                                          create_graph=True)
            loss = loss + self.hparams["grad_penalty"] * grad.pow(2).sum(1).mean()
        return loss

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        self.update_count += 1
        d_steps = self.hparams["d_steps_per_g_step"]
        batch = concat_batches(minibatches)
        domains = torch.cat([torch.full((len(b.y),), i, dtype=torch.long, device=b.y.device)
                             for i, b in enumerate(minibatches)])
        if int(self.update_count) % (1 + d_steps) < d_steps:
            with torch.no_grad():  # the backbone is not updated on discriminator steps
                z = self.features(batch)
            disc_loss = self.discriminator_loss(z, batch.y, domains, batch.shard)
            self.step(disc_loss, self.disc_optimizer)
            return {"loss": disc_loss.item(), "disc_loss": disc_loss.item()}
        z = self.features(batch)
        task = cross_entropy(self.classifier()(z), batch.y)
        disc_loss = self.discriminator_loss(z, batch.y, domains, batch.shard)
        aux = self.moe_aux_loss()
        gen_loss = task - self.hparams["lambda"] * disc_loss + aux
        self.disc_optimizer.zero_grad(set_to_none=True)
        self.step(gen_loss)
        return {"loss": gen_loss.item(), "gen_loss": gen_loss.item(), "loss_task": task.item(),
                "loss_aux": aux.item()}


@register_algorithm
class DANN(AbstractDANN):
    DESCRIPTION = "Domain-adversarial training: features from which a discriminator cannot tell the domain"
    REFERENCE = "Ganin et al., Domain-Adversarial Training of Neural Networks, JMLR 2016"


@register_algorithm
class CDANN(AbstractDANN):
    DESCRIPTION = "Conditional DANN: the domain discriminator also sees the class (class-balanced)"
    REFERENCE = "Li et al., Deep Domain Generalization via Conditional Invariant Adversarial Networks, ECCV 2018"
    CONDITIONAL = True
