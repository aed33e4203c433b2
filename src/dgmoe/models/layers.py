"""Transformer layers with timm's parameter names, so timm/DeiT state dicts load strictly.

Names follow `timm.models.vision_transformer`: `patch_embed.proj`, `attn.qkv`, `attn.proj`, `mlp.fc1`,
`mlp.fc2`, `norm1`, `norm2`, and LayerScale's `ls1.gamma`/`ls2.gamma` (CaiT, Touvron et al. 2021, eq. 5;
DINOv2). Only what dgmoe uses is implemented (no q/k norm).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.moe.experts import Mlp  # noqa: F401  (the dense FFN, shared with the MoE layers)
from dgmoe.sharding import Dropout, active_shard, per_sample


def to_2tuple(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)  # type: ignore[return-value]


class PatchEmbed(nn.Module):
    """Image to patch tokens with one strided convolution (ViT §3.1)."""

    def __init__(self, img_size: int | tuple[int, int] = 224, patch_size: int | tuple[int, int] = 16,
                 in_chans: int = 3, embed_dim: int = 768, bias: bool = True):
        super().__init__()
        self.img_size = to_2tuple(img_size)
        self.patch_size = to_2tuple(patch_size)
        if self.img_size[0] % self.patch_size[0] or self.img_size[1] % self.patch_size[1]:
            raise ValueError(f"img_size {self.img_size} is not divisible by patch_size {self.patch_size}")
        self.grid_size = (self.img_size[0] // self.patch_size[0], self.img_size[1] // self.patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != self.img_size:
            raise ValueError(f"input is {tuple(x.shape[-2:])} px but the model was built for {self.img_size}")
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed_dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = Dropout(proj_drop)

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv.unbind(0)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """Softmax attention [B, heads, N, N] (for attention maps; the forward uses fused SDPA)."""
        q, k, _ = self.split_heads(x)
        return ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.split_heads(x)
        if self.training and self.attn_drop > 0 and active_shard() is not None:
            # SDPA draws its dropout mask internally; under multi-process training it must be per sample
            weights = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            keep = 1.0 - self.attn_drop
            weights = weights * (per_sample(tuple(weights.shape), lambda t: t.bernoulli_(keep), weights) / keep)
            x = weights @ v
        else:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop if self.training else 0.0)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(b, n, c)))


class DropPath(nn.Module):
    """Stochastic depth per sample (mask-based as timm, so routers still see every token); the mask is drawn
    with `dgmoe.sharding.per_sample`, so that it does not depend on the process count."""

    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1.0 - self.drop_prob
        mask = per_sample((x.shape[0],) + (1,) * (x.ndim - 1), lambda t: t.bernoulli_(keep), x)
        return x * mask / keep


class LayerScale(nn.Module):
    """x * gamma, a learned per-channel scale on each residual branch (CaiT eq. 5; DINOv2), initialised to
    `init_values` (timm's and DINOv2's parameter name `gamma`)."""

    def __init__(self, dim: int, init_values: float = 1e-5):
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def reset_parameters_like_timm(self) -> None:
        nn.init.constant_(self.gamma, self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class Block(nn.Module):
    """Pre-norm transformer block: x + ls1(attn(norm1(x))), then x + ls2(mlp(norm2(x))) (ViT eq. 2-3; the
    LayerScales ls1/ls2 of CaiT eq. 5 only with `init_values`). `mlp` replaces the dense FFN (an MoE layer
    makes it a sparse block); `activation` is the dense FFN's; `norm_eps` the LayerNorms' epsilon (timm's
    ViT 1e-6, CLIP 1e-5)."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True,
                 proj_drop: float = 0.0, attn_drop: float = 0.0, drop_path: float = 0.0,
                 mlp: nn.Module | None = None, init_values: float | None = None, activation: str = "gelu",
                 norm_eps: float = 1e-6):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.ls1 = LayerScale(dim, init_values) if init_values is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = mlp if mlp is not None else Mlp(dim, int(dim * mlp_ratio), proj_drop, activation)
        self.ls2 = LayerScale(dim, init_values) if init_values is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
