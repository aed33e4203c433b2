"""MoGE's fallbacks beyond the metadata distribution (§2.2).

(i) MoGE-SE, the invariant fallback: disable specialist routing (f(x, m) = f_0(x) in every MoGE block, no
    metadata needed) and fit a *new* linear classifier on the frozen shared-expert features of the training
    data (`fit_shared_expert_head`).
(ii) Plug-in pretrained location encoders: build MoGE with `location_encoder="pretrained"` and
    `location_encoder_kwargs={"path": ...}` (trained with the frozen encoder, MoGE-SC), or swap one into a
    model with `replace_location_encoder` (the context width must match the router codes).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset

from dgmoe.data.loaders import eval_loader


@torch.no_grad()
def collect_features(network: nn.Module, environments: Sequence[Dataset], indices: Sequence[np.ndarray | None],
                     transform, batch_size: int = 256, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-logit features and labels of the given items (eval mode; metadata passed when the net uses it)."""
    network.eval()
    net: Any = network  # timm's API, not declared by nn.Module
    feats, labels = [], []
    for env, idx in zip(environments, indices):
        for batch in eval_loader(env, idx, transform, batch_size):
            batch = batch.to(device)
            if getattr(net, "uses_metadata", False):
                tokens = net.forward_features(batch.x, meta=batch.meta)
            else:
                tokens = net.forward_features(batch.x)
            feats.append(net.forward_head(tokens, pre_logits=True).float().cpu())
            labels.append(batch.y.cpu())
    return torch.cat(feats), torch.cat(labels)


def fit_linear_head(features: torch.Tensor, labels: torch.Tensor, num_classes: int, steps: int = 500,
                    lr: float = 1e-2, weight_decay: float = 1e-4, seed: int = 0) -> nn.Linear:
    """A linear classifier trained full-batch with Adam on fixed features (deterministic given `seed`)."""
    if features.ndim != 2 or labels.shape != (features.shape[0],):
        raise ValueError(f"need features [N, D] and labels [N], got {tuple(features.shape)}, {tuple(labels.shape)}")
    gen = torch.Generator().manual_seed(seed)
    head = nn.Linear(features.shape[1], num_classes)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * 0.01)
        head.bias.zero_()
    mean, std = features.mean(0, keepdim=True), features.std(0, keepdim=True).clamp_min(1e-6)
    x = (features - mean) / std
    opt = torch.optim.Adam(head.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(head(x), labels).backward()
        opt.step()
    # fold the feature standardisation into the layer, so it applies to raw features
    with torch.no_grad():
        w = head.weight / std
        head.bias.sub_((w * mean).sum(1))
        head.weight.copy_(w)
    return head


def fit_shared_expert_head(network: nn.Module, environments: Sequence[Dataset], indices: Sequence[np.ndarray | None],
                           transform, num_classes: int, steps: int = 500, lr: float = 1e-2, seed: int = 0,
                           device: str = "cpu") -> nn.Module:
    """MoGE-SE (§2.2 (i)): shared-expert-only routing, frozen backbone, a new linear head fitted on the
    training items (`environments[i]` restricted to `indices[i]`). Returns the network, modified in place."""
    if not hasattr(network, "set_routing_mode"):
        raise ValueError(f"MoGE-SE needs a MoGE network, got {type(network).__name__}")
    moge: Any = network  # checked above
    moge.set_routing_mode("shared_only")
    for p in network.parameters():
        p.requires_grad_(False)
    feats, labels = collect_features(network, environments, indices, transform, device=device)
    head = fit_linear_head(feats, labels, num_classes, steps, lr, seed=seed)
    network.head = head.to(device)
    return network.eval()


def replace_location_encoder(network: nn.Module, encoder: nn.Module) -> nn.Module:
    """Swap a MoGE model's phi (e.g. for a frozen pretrained encoder); the output width must stay D_r."""
    old = getattr(network, "location_encoder", None)
    if old is None:
        raise ValueError(f"{type(network).__name__} has no location encoder to replace")
    if encoder.out_dim != old.out_dim:
        raise ValueError(f"the new location encoder outputs {encoder.out_dim} values but the routers' codes have "
                         f"{old.out_dim}; build the model with this encoder instead")
    network.location_encoder = encoder
    return network
