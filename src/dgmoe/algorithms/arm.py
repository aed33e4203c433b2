"""Adaptive risk minimisation with the contextual meta-learner, ARM-CML (Zhang et al., NeurIPS 2021), as
DomainBed implements it (the paper's equation numbers were not checked here).

A context network (three 5x5 convolutions, 64 channels, BatchNorm and ReLU between them, one output
channel at the input's resolution) maps every image of a *support set* (a batch from one domain) to a
context map; the maps are averaged over the support set and the mean is appended to each image as an extra
input channel of the backbone. The model is thus adapted to a domain from an unlabelled batch of it.
Training is ERM on the contextualised images, every training domain's minibatch being one support set.
`predict` uses consecutive groups of `batch_size` images as support sets when the batch divides into them,
else the whole batch (DomainBed's rule).

Context network training: in DomainBed the context network is created after the optimiser, so it is never
trained (its weights stay at their initialisation, its BatchNorm statistics follow the batches); this is
the default (`arm_train_context=False`). `True` trains it with the backbone, as the paper's ARM-CML.

Backbones: DomainBed widens its featurizer's first convolution to the extra channel (ResNet: a 4-channel
conv1 whose new channel starts as a copy of the red one). dgmoe does the same for its ResNets (`conv1`) and,
as the ViT counterpart, for the patch embedding of the ViT family (`patch_embed.proj`: dense ViT, GMoE,
SF-MoE, MoGE), i.e. the context map is a fourth image plane that is patchified with the image. Backbones
whose input layer is not a plain convolution on the image (the hybrid ResNet-stem ViT) are refused. The
widened network cannot be evaluated without its context (the saved weights have the extra channel).

Under multi-process training a domain's support set is its whole minibatch: the context mean is the global
one and the context network's BatchNorm uses the global batch's statistics.
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn as nn

from dgmoe.algorithms.base import Algorithm, concat_batches, cross_entropy, split_sizes
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import DatasetHParams, HParam, fixed
from dgmoe.sharding import Shard, active_shard, all_reduce_sum, concat_shards, global_mean, use_shard


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics are those of the global batch under multi-process training
    (sums combined across processes, differentiably); without a shard it is `nn.BatchNorm2d`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shard = active_shard()
        if not self.training or shard is None:
            return super().forward(x)
        # built with nn.BatchNorm2d's defaults: running statistics and a momentum
        assert self.running_mean is not None and self.running_var is not None and self.momentum is not None
        assert self.num_batches_tracked is not None
        count = shard.size * x.shape[2] * x.shape[3]
        mean = all_reduce_sum(x.sum((0, 2, 3)), shard) / count
        var = all_reduce_sum((x - mean[None, :, None, None]).pow(2).sum((0, 2, 3)), shard) / count
        with torch.no_grad():
            self.num_batches_tracked += 1
            self.running_mean.lerp_(mean.detach(), self.momentum)
            self.running_var.lerp_(var.detach() * count / (count - 1), self.momentum)
        scale = self.weight / (var + self.eps).sqrt()
        return (x - mean[None, :, None, None]) * scale[None, :, None, None] + self.bias[None, :, None, None]


class ContextNet(nn.Module):
    """DomainBed's ARM context network: one context value per pixel."""

    def __init__(self, in_chans: int, width: int = 64, kernel: int = 5):
        super().__init__()
        pad = (kernel - 1) // 2
        self.context_net = nn.Sequential(
            nn.Conv2d(in_chans, width, kernel, padding=pad), GlobalBatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, kernel, padding=pad), GlobalBatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 1, kernel, padding=pad))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.context_net(x)


def input_conv(network: nn.Module) -> tuple[nn.Module, str]:
    """The convolution that reads the image, as (parent module, attribute name): the network's first
    convolution in registration order (a ResNet's conv1, a ViT's patch_embed.proj), which must be a plain
    `nn.Conv2d` (a weight-standardised stem, as the hybrid ViT's, cannot take a copied channel)."""
    for name, module in network.named_modules():
        if isinstance(module, nn.Conv2d):
            if type(module) is not nn.Conv2d:
                break
            parent_name, _, attr = name.rpartition(".")
            return network.get_submodule(parent_name), attr
    raise ValueError(f"ARM appends a context channel to the image and needs a backbone whose input layer is a "
                     f"plain convolution on the image (a ResNet's conv1 or a ViT's patch_embed.proj); "
                     f"{type(network).__name__} has none")


@torch.no_grad()
def widen_input(network: nn.Module, extra: int = 1) -> nn.Conv2d:
    """Give the network's input convolution `extra` more input channels; channel c starts as a copy of
    channel c mod (old channels), as DomainBed's ResNet for non-RGB inputs."""
    parent, name = input_conv(network)
    old: nn.Conv2d = getattr(parent, name)
    c = old.in_channels
    # nn.Conv2d stores its sizes as tuple[int, ...] in torch's stubs; they are the 2-tuples its __init__ takes
    new = nn.Conv2d(c + extra, old.out_channels, old.kernel_size, old.stride, old.padding, old.dilation,  # type: ignore[arg-type]
                    old.groups, old.bias is not None, old.padding_mode, device=old.weight.device,
                    dtype=old.weight.dtype)
    new.weight.copy_(old.weight[:, [i % c for i in range(c + extra)]])
    if old.bias is not None:
        assert new.bias is not None  # built with a bias above
        new.bias.copy_(old.bias)
    new.requires_grad_(old.weight.requires_grad)  # a frozen (parameter-efficient) backbone's stays frozen
    setattr(parent, name, new)
    return new


def support_means(context: torch.Tensor, sizes: list[int], shards: list[Shard | None]) -> torch.Tensor:
    """Every sample's support-set mean context: one support set per size (per shard: the global one)."""
    parts = [global_mean(c, s).unsqueeze(0).expand_as(c) for c, s in zip(context.split(sizes), shards)]
    return torch.cat(parts)


@register_algorithm
class ARM(Algorithm):
    DESCRIPTION = ("Adaptive risk minimisation (ARM-CML): a context map averaged over a domain's batch is an extra "
                   "input channel")
    REFERENCE = "Zhang et al., Adaptive Risk Minimization: Learning to Adapt to Domain Shift, NeurIPS 2021"
    HPARAMS = {"arm_train_context": HParam(False, fixed(False))}
    OVERRIDES = ("batch_size",)

    @classmethod
    def hparam_specs(cls, dataset: DatasetHParams, shared: Mapping[str, HParam]) -> dict[str, HParam]:
        """DomainBed's ARM batch size (support size) 8 on the image-folder datasets; small images keep theirs."""
        specs = dict(cls.HPARAMS)
        if not dataset.small_images:
            specs["batch_size"] = HParam(8, fixed(8))
        return specs

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        in_chans = widen_input(network).in_channels - 1
        self.context_net = ContextNet(in_chans)
        self.support_size = self.hparams["batch_size"]
        params = list(self.network.parameters())
        if self.hparams["arm_train_context"]:
            params += list(self.context_net.parameters())
        else:  # DomainBed's: no gradients to compute (its BatchNorm statistics still follow the batches)
            self.context_net.requires_grad_(False)
        self.optimizer = self.make_optimizer(params)

    def contextualise(self, x: torch.Tensor, sizes: list[int], shards: list[Shard | None]) -> torch.Tensor:
        shard = concat_shards(shards)
        with use_shard(shard):
            context = self.context_net(x)
        return torch.cat([x, support_means(context, sizes, shards).to(x.dtype)], dim=1)

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        batch = concat_batches(minibatches)
        x = self.contextualise(batch.x, split_sizes(minibatches), [b.shard for b in minibatches])
        task = cross_entropy(self.logits(Batch(x, batch.y, batch.meta, batch.shard)), batch.y)
        aux = self.moe_aux_loss()
        self.step(task + aux)
        return {"loss": (task + aux).item(), "loss_task": task.item(), "loss_aux": aux.item()}

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        n = len(x)
        size = self.support_size if n % self.support_size == 0 else n
        return self.logits(self.contextualise(x, [size] * (n // size), [None] * (n // size)), meta)

    predict_online = predict

