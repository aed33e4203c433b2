"""Per-head attention maps of a ViT block (GMoE App. E Figs. 14-17, SF-MoE Fig. 3) and head redundancy.

The softmax attention `softmax(q k^T / sqrt(d_head))` of block `block` is recomputed from the input of that
block's `attn` module (captured by a forward hook), so no model changes are needed: any timm-style
attention with `qkv` (Linear dim -> 3 dim), `num_heads` and optionally `scale` works.

Head redundancy (SF-MoE §2.1: "some heads might attend to similar features"): for each image, take every
head's CLS-to-patch attention distribution a_h over the N patches and average a similarity over the
H(H-1)/2 head pairs, then average over images. Two similarities are offered:

- ``cosine``: cos(a_i, a_j) in [0, 1] (attention is non-negative); 1 = identical maps up to scale.
- ``js``: 1 - JS(a_i || a_j) with the Jensen-Shannon divergence in bits, also in [0, 1]; 1 = identical
  distributions, 0 = disjoint supports.

Higher means more redundant heads.
"""
from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn as nn

Metric = Literal["cosine", "js"]


def _softmax_attention(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    timm_attn: Any = attn  # duck-typed: `attention_weights`, or `num_heads` and `qkv` (module docstring)
    if hasattr(timm_attn, "attention_weights"):
        return timm_attn.attention_weights(x)
    b, n, c = x.shape
    h = timm_attn.num_heads
    qkv = timm_attn.qkv(x).reshape(b, n, 3, h, c // h).permute(2, 0, 3, 1, 4)
    q, k = qkv[0], qkv[1]
    q = getattr(attn, "q_norm", nn.Identity())(q)
    k = getattr(attn, "k_norm", nn.Identity())(k)
    scale = getattr(attn, "scale", (c // h) ** -0.5)
    return ((q * scale) @ k.transpose(-2, -1)).softmax(dim=-1)


@torch.no_grad()
def attention_weights(model: nn.Module, images: torch.Tensor, block: int = -1) -> torch.Tensor:
    """`[B, heads, N, N]` softmax attention of `model.blocks[block].attn` for a batch of model inputs."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not hasattr(blocks[block], "attn"):
        raise ValueError(f"{type(model).__name__} has no `blocks[{block}].attn`: attention maps need a timm-style ViT")
    attn = blocks[block].attn
    captured: list[torch.Tensor] = []
    handle = attn.register_forward_hook(lambda mod, args, out: captured.append(_softmax_attention(mod, args[0])))
    was_training = model.training
    model.eval()
    try:
        model(images)
    finally:
        handle.remove()
        model.train(was_training)
    return captured[0]


def cls_attention_maps(weights: torch.Tensor, grid_size: tuple[int, int], num_prefix_tokens: int = 1) -> torch.Tensor:
    """`[B, heads, gh, gw]`: attention of the CLS token to every patch (each map sums to <= 1)."""
    b, h, n, _ = weights.shape
    gh, gw = grid_size
    if n - num_prefix_tokens != gh * gw:
        raise ValueError(f"{n} tokens minus {num_prefix_tokens} prefix tokens is not a {gh}x{gw} patch grid")
    return weights[:, :, 0, num_prefix_tokens:].reshape(b, h, gh, gw)


def pairwise_head_similarity(maps: torch.Tensor, metric: Metric = "cosine") -> torch.Tensor:
    """`[B, H, H]` similarity between the heads' maps `[B, H, ...]` (see the module docstring)."""
    a = maps.reshape(maps.shape[0], maps.shape[1], -1).double()
    if metric == "cosine":
        a = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return a @ a.transpose(1, 2)
    if metric == "js":
        p = a / a.sum(-1, keepdim=True).clamp_min(1e-12)
        pi, pj = p[:, :, None, :], p[:, None, :, :]
        m = 0.5 * (pi + pj)

        def kl(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.where(x > 0, x * (torch.log2(x.clamp_min(1e-300)) - torch.log2(y.clamp_min(1e-300))),
                               torch.zeros_like(x)).sum(-1)

        return 1.0 - 0.5 * (kl(pi, m) + kl(pj, m))
    raise ValueError(f"head redundancy metric must be 'cosine' or 'js', got {metric!r}")


def head_redundancy(maps: torch.Tensor, metric: Metric = "cosine") -> float:
    """Mean over images and head pairs i < j of the pairwise similarity (1 = all heads identical)."""
    h = maps.shape[1]
    if h < 2:
        raise ValueError("head redundancy needs at least 2 heads")
    sim = pairwise_head_similarity(maps, metric)
    iu = torch.triu_indices(h, h, offset=1)
    return float(sim[:, iu[0], iu[1]].mean())
