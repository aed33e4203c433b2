"""Style-agnostic networks, SagNet (Nam et al., CVPR 2021, Algorithm 1), as DomainBed implements them.

A content network (the backbone's classifier) learns on features whose *style* is randomised, a style
network (a second linear head) on features whose *content* is randomised, and the backbone learns to fool
the style network. With per-sample statistics mu, sigma^2 of a feature vector z over its channels,
z_hat = (z - mu) / sqrt(sigma^2 + eps), alpha ~ U(0, 1) per sample and a random permutation pi of the batch:

- style randomisation: z_hat * sqrt(s^2 + eps) + m with m = alpha mu + (1 - alpha) mu_pi,
  s^2 = alpha sigma^2 + (1 - alpha) sigma^2_pi (the sample keeps its content, mixes its style);
- content randomisation: z_hat_pi (detached) * sqrt(sigma^2 + eps) + mu (another sample's content in this
  sample's style).

Each update takes three steps, each on a fresh forward (Algorithm 1): (1) backbone and classifier on
CE(content(style-randomised z)); (2) the style head on CE(style(content-randomised z)); (3) the backbone
alone on the adversarial loss `sag_w_adv` * mean_c(-log softmax(style(content-randomised z))_c) (the
style head's prediction pushed towards uniform). Three Adam optimisers (backbone, classifier, style head),
as DomainBed. eps = 1e-5, variances unbiased.

Where the randomisation acts: DomainBed b93c22a randomises the *pooled feature vector* (statistics over
its channels; its ResNet split into layer1-3 / layer4 with AdaIN on the layer3 maps, closer to the paper,
is commented out there because it "puts in disadvantage the other algorithms"). dgmoe follows DomainBed on
every backbone: the pooled feature of `forward_head(pre_logits=True)` (a ViT's class token, the ResNet's
pooled map). The paper's placement between convolutional stages is not implemented.

Step (2) does not update the backbone, so its forward runs without a graph; the MoE auxiliary loss is added
to steps (1) and (3). Under multi-process training alpha is drawn per sample and pi over the whole batch
(every process draws the same permutation; statistics and features of other processes' samples are
gathered), so the update is the one-process update.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches, cross_entropy
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, log_uniform
from dgmoe.moe.auxiliary import clear_aux
from dgmoe.sharding import Shard, gather_samples, per_sample, use_shard

EPS = 1e-5


def randomize(z: torch.Tensor, what: str, shard: Shard | None = None, eps: float = EPS) -> torch.Tensor:
    """SagNet's style ('style') or content ('content') randomisation of feature vectors [B, C]. Draws alpha
    (per sample) and then the permutation, from torch's generator (DomainBed's order)."""
    if what not in ("style", "content"):
        raise ValueError(f"randomize what must be 'style' or 'content', got {what!r}")
    with use_shard(shard):
        alpha = per_sample((len(z), 1), lambda t: t.uniform_(), z)
    perm = torch.randperm(shard.size if shard is not None else len(z)).to(z.device)
    rows = perm if shard is None else perm[shard.index]
    mean, var = z.mean(-1, keepdim=True), z.var(-1, keepdim=True)
    normed = (z - mean) / (var + eps).sqrt()
    if what == "style":
        mean = alpha * mean + (1 - alpha) * gather_samples(mean, shard)[rows]
        var = alpha * var + (1 - alpha) * gather_samples(var, shard)[rows]
    else:
        normed = gather_samples(normed, shard)[rows].detach()
    return normed * (var + eps).sqrt() + mean


def uniform_prediction_loss(logits: torch.Tensor) -> torch.Tensor:
    """mean over samples and classes of -log softmax: minimal when the prediction is uniform."""
    return -F.log_softmax(at_least_fp32(logits), dim=1).mean(1).mean()


@register_algorithm
class SagNet(Algorithm):
    DESCRIPTION = "Style-agnostic networks: learn on style-randomised features, adversarially against a style head"
    REFERENCE = "Nam et al., Reducing Domain Gap by Reducing Style Bias, CVPR 2021"
    HPARAMS = {"sag_w_adv": HParam(0.1, log_uniform(-2, 1))}

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        classifier = self.classifier()
        head_ids = {id(p) for p in classifier.parameters()}
        self.style_head = nn.Linear(network.num_features, num_classes)
        self.optimizer = self.make_optimizer([p for p in network.parameters() if id(p) not in head_ids])
        self.optimizer_c = self.make_optimizer(classifier.parameters())
        self.optimizer_s = self.make_optimizer(self.style_head.parameters())

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "classifier": self.optimizer_c, "style": self.optimizer_s}

    def step_all(self, loss: torch.Tensor, optimizers: list[torch.optim.Optimizer]) -> None:
        """One backward, gradients averaged over processes, then each optimiser steps; gradients are cleared
        afterwards so that the next step's synchronisation sees only its own."""
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        self.sync_gradients()
        for opt in optimizers:
            opt.step()
        self.zero_grad(set_to_none=True)

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        batch = concat_batches(minibatches)
        # (1) content: backbone and classifier on style-randomised features
        z = self.features(batch)
        loss_c = cross_entropy(self.classifier()(randomize(z, "style", batch.shard)), batch.y)
        aux_c = self.moe_aux_loss()
        self.step_all(loss_c + aux_c, [self.optimizer, self.optimizer_c])
        clear_aux(self.network)
        # (2) style head on content-randomised features (the backbone is not updated)
        with torch.no_grad():
            z = self.features(batch)
        loss_s = cross_entropy(self.style_head(randomize(z, "content", batch.shard)), batch.y)
        self.step_all(loss_s, [self.optimizer_s])
        clear_aux(self.network)
        # (3) adversary: the backbone makes the style head's prediction uniform
        z = self.features(batch)
        style_logits = self.style_head(randomize(z, "content", batch.shard))
        loss_adv = self.hparams["sag_w_adv"] * uniform_prediction_loss(style_logits)
        aux_adv = self.moe_aux_loss()
        self.step_all(loss_adv + aux_adv, [self.optimizer])
        return {"loss": loss_c.item(), "loss_c": loss_c.item(), "loss_s": loss_s.item(), "loss_adv": loss_adv.item(),
                "loss_aux": (aux_c.item() + aux_adv.item()) / 2}
