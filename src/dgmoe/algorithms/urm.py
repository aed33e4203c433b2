"""Uniform risk minimisation, URM (Krishnamachari et al., TMLR 2024, adversarial form), as DomainBed.

The features are bounded by an output activation a (`urm_generator_output`: tanh, values in [-1, 1]; relu
or sigmoid, [0, 1]) and pushed towards the uniform distribution on that box with a GAN-style game. A
discriminator D (an MLP: Linear(d, 100), LeakyReLU, `urm_discriminator_hidden_layers` x (Linear(100, 100),
LeakyReLU), Linear(100, 1)) tells uniform noise u (label 1) from features z (label 0). Each update
1. trains the backbone on CE(h(z), y) + lambda * BCE(D(z), 1) (`urm_adv_lambda`), with the shared Adam;
2. trains D on BCE(D(u), 1) + lambda * BCE(D(z.detach()), 0), with its own optimiser
   (`urm_discriminator_optimizer`: Adam, or SGD with momentum 0.9; `urm_discriminator_lr`, the shared
   weight decay), on the features of step 1. `urm_discriminator_label_smoothing` = s > 0 draws the labels
   uniformly from [1 - s, 1] and [0, s].

Backbones: DomainBed puts a on its featurizer's output (ResNet: after the pooled feature's dropout); dgmoe
puts it on the pooled feature of any backbone (`forward_head(pre_logits=True)`: a ViT's class token, the
ResNet's pooled map after dropout), before the classifier: the network's classifier becomes
`Sequential(a, h)`, so that the network alone (and its saved weights, whose head keys gain the index `1.`)
predicts as the algorithm. Noise and soft labels are drawn per sample (`sharding.per_sample`), so
multi-process training draws what one process draws.
"""
from __future__ import annotations

from typing import Mapping, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.adrmx import replace_classifier
from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import DatasetHParams, HParam, choice, log_uniform, uniform
from dgmoe.sharding import per_sample, use_shard

ACTIVATIONS = {"tanh": (nn.Tanh, -1.0, 1.0), "relu": (nn.ReLU, 0.0, 1.0), "sigmoid": (nn.Sigmoid, 0.0, 1.0)}


def urm_discriminator(dim: int, hidden_layers: int, width: int = 100) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(dim, width), nn.LeakyReLU()]
    for _ in range(hidden_layers):
        layers += [nn.Linear(width, width), nn.LeakyReLU()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def uniform_like(z: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Noise uniform on [low, high) with z's shape, drawn per sample."""
    return (high - low) * per_sample(tuple(z.shape), lambda t: t.uniform_(), z) + low


@register_algorithm
class URM(Algorithm):
    DESCRIPTION = "Uniform risk minimisation: an adversary pushes the bounded features towards a uniform distribution"
    REFERENCE = ("Krishnamachari et al., Uniformly Distributed Feature Representations for Fair and Robust "
                 "Learning, TMLR 2024")
    HPARAMS = {
        "urm": HParam("adversarial", choice(["adversarial"])),
        "urm_adv_lambda": HParam(0.1, uniform(0, 0.2)),
        "urm_discriminator_label_smoothing": HParam(0, uniform(0, 0)),
        "urm_discriminator_optimizer": HParam("adam", choice(["adam"])),
        "urm_discriminator_hidden_layers": HParam(1, choice([1, 2, 3])),
        "urm_generator_output": HParam("tanh", choice(["tanh", "relu"])),
        "urm_discriminator_lr": HParam(5e-5, log_uniform(-6, -4.5)),
    }

    @classmethod
    def hparam_specs(cls, dataset: DatasetHParams, shared: Mapping[str, HParam]) -> dict[str, HParam]:
        specs = dict(cls.HPARAMS)
        if dataset.small_images:
            specs["urm_discriminator_lr"] = HParam(1e-3, log_uniform(-5.5, -3.5))
        return specs

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        hp = self.hparams
        if hp["urm"] != "adversarial":
            raise ValueError(f"URM implements urm='adversarial' only, got {hp['urm']!r}")
        if hp["urm_generator_output"] not in ACTIVATIONS:
            raise ValueError(f"urm_generator_output must be one of {sorted(ACTIVATIONS)} (a bounded feature range "
                             f"for the uniform target), got {hp['urm_generator_output']!r}")
        act, self.noise_low, self.noise_high = ACTIVATIONS[hp["urm_generator_output"]]
        replace_classifier(network, nn.Sequential(act(), network.get_classifier()))
        self.discriminator = urm_discriminator(network.num_features, hp["urm_discriminator_hidden_layers"])
        lr, wd = hp["urm_discriminator_lr"], hp["weight_decay"]
        if hp["urm_discriminator_optimizer"] == "adam":
            self.disc_optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=lr, weight_decay=wd)
        elif hp["urm_discriminator_optimizer"] == "sgd":
            self.disc_optimizer = torch.optim.SGD(self.discriminator.parameters(), lr=lr, weight_decay=wd,
                                                  momentum=0.9)
        else:
            raise ValueError(f"urm_discriminator_optimizer must be 'adam' or 'sgd', got "
                             f"{hp['urm_discriminator_optimizer']!r}")

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "discriminator": self.disc_optimizer}

    def discriminator_labels(self, like: torch.Tensor, value: float) -> torch.Tensor:
        s = self.hparams["urm_discriminator_label_smoothing"]
        if not s:
            return torch.full((len(like),), value, dtype=like.dtype, device=like.device)
        low, high = (1.0 - s, 1.0) if value == 1.0 else (0.0, s)
        return (high - low) * per_sample((len(like),), lambda t: t.uniform_(), like) + low

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        lam = self.hparams["urm_adv_lambda"]
        batch = concat_batches(minibatches)
        activation, head = cast(nn.Sequential, self.classifier())  # set in __init__
        z = activation(self.features(batch))
        task = cross_entropy(head(z), batch.y)
        ones = torch.ones(len(z), dtype=at_least_fp32(z).dtype, device=z.device)
        gen = F.binary_cross_entropy_with_logits(at_least_fp32(self.discriminator(z)).squeeze(1), ones)
        aux = self.moe_aux_loss()
        loss = task + lam * gen + aux
        self.disc_optimizer.zero_grad(set_to_none=True)
        self.step(loss)
        self.optimizer.zero_grad(set_to_none=True)  # the discriminator step must not re-average them
        feats = at_least_fp32(z.detach())
        with use_shard(batch.shard):  # noise and soft labels: the global batch's draws
            noise = uniform_like(feats, self.noise_low, self.noise_high)
            true_y = self.discriminator_labels(noise, 1.0)
            fake_y = self.discriminator_labels(feats, 0.0)
        noise_loss = F.binary_cross_entropy_with_logits(self.discriminator(noise).squeeze(1), true_y)
        feats_loss = F.binary_cross_entropy_with_logits(self.discriminator(feats).squeeze(1), fake_y)
        disc_loss = noise_loss + lam * feats_loss
        self.step(disc_loss, self.disc_optimizer)
        return {"loss": loss.item(), "loss_task": task.item(), "gen_loss": gen.item(), "disc_loss": disc_loss.item(),
                "loss_aux": aux.item()}
