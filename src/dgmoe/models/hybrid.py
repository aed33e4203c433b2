"""The ResNet patch embedding of the hybrid ViT (Dosovitskiy et al. 2021, §3.1 "Hybrid Architecture"),
as timm's `vit_small_r26_s32_224` builds it, with timm's parameter names so its checkpoints load strictly.

The stem is a non-pre-activation ResNetV2 (Kolesnikov et al., BiT) with weight-standardised convolutions
(eps 1e-8), GroupNorm(32) + ReLU, TF-style "same" padding, 4 stages of bottlenecks (channels 256, 512,
1024, 2048) and an output stride of 32; a 1x1 convolution (`patch_embed.proj`) maps its features to
tokens. Hybrid SF-MoE (SF-MoE §2.4) puts sparse/fusion blocks on top.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.models.layers import to_2tuple


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TF 'SAME' padding (before, after) along one axis."""
    pad = max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return pad // 2, pad - pad // 2


def pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    top, bottom = same_padding(x.shape[-2], kernel, stride)
    left, right = same_padding(x.shape[-1], kernel, stride)
    return F.pad(x, (left, right, top, bottom), value=value) if top or bottom or left or right else x


class StdConv2dSame(nn.Conv2d):
    """Weight-standardised convolution (Qiao et al. 2019, eq. 5; BiT §4.1) with TF 'same' padding.

    Each output filter is standardised over its fan-in, W' = (W - mean) / sqrt(var + eps) with the biased
    variance. That is a LayerNorm without affine over the rows of the `[out, in*k*k]` weight, so one fused
    `F.layer_norm` computes it (forward and backward), instead of five elementwise/reduction ops; on the
    small images of DG runs, where the stem's 14M weights outweigh its activations, this is what costs.
    'same' padding is static (handed to the convolution, no padded copy of the input) when stride is 1,
    where it is (k - 1) / 2 on each side for every input size, and computed per input otherwise.
    """

    def __init__(self, in_chs: int, out_chs: int, kernel_size: int, stride: int = 1, eps: float = 1e-8):
        static = stride == 1 and kernel_size % 2 == 1
        super().__init__(in_chs, out_chs, kernel_size, stride=stride, padding=(kernel_size - 1) // 2 if static else 0,
                         bias=False)
        self.same_pad = not static
        self.eps = eps

    def standardized_weight(self) -> torch.Tensor:
        w = self.weight
        return F.layer_norm(w.reshape(w.shape[0], -1), (w[0].numel(),), eps=self.eps).reshape_as(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.same_pad:
            x = pad_same(x, self.kernel_size[0], self.stride[0])
        return F.conv2d(x, self.standardized_weight(), None, self.stride, self.padding)


class GroupNormAct(nn.GroupNorm):
    def __init__(self, channels: int, apply_act: bool = True, groups: int = 32):
        super().__init__(groups, channels, eps=1e-5)
        self.apply_act = apply_act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        return F.relu_(x) if self.apply_act else x  # in place: group_norm's backward needs its input only


class DownsampleConv(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, stride: int):
        super().__init__()
        self.conv = StdConv2dSame(in_chs, out_chs, 1, stride=stride)
        self.norm = GroupNormAct(out_chs, apply_act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class Bottleneck(nn.Module):
    """Non-pre-activation bottleneck (ResNet v1.5 ordering, stride on the 3x3)."""

    def __init__(self, in_chs: int, out_chs: int, stride: int, downsample: bool):
        super().__init__()
        mid = out_chs // 4
        self.downsample = DownsampleConv(in_chs, out_chs, stride) if downsample else None
        self.conv1, self.norm1 = StdConv2dSame(in_chs, mid, 1), GroupNormAct(mid)
        self.conv2, self.norm2 = StdConv2dSame(mid, mid, 3, stride=stride), GroupNormAct(mid)
        self.conv3, self.norm3 = StdConv2dSame(mid, out_chs, 1), GroupNormAct(out_chs, apply_act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = self.downsample(x) if self.downsample is not None else x
        x = self.norm1(self.conv1(x))
        x = self.norm2(self.conv2(x))
        x = self.norm3(self.conv3(x))
        return F.relu_(x + shortcut)


class Stage(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, stride: int, depth: int):
        super().__init__()
        self.blocks = nn.Sequential(*[Bottleneck(in_chs if i == 0 else out_chs, out_chs, stride if i == 0 else 1,
                                                 downsample=i == 0) for i in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class Stem(nn.Module):
    def __init__(self, in_chans: int, out_chs: int = 64):
        super().__init__()
        self.conv = StdConv2dSame(in_chans, out_chs, 7, stride=2)
        self.norm = GroupNormAct(out_chs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.conv(x))
        return F.max_pool2d(pad_same(x, 3, 2, value=float("-inf")), 3, 2)


class ResNetV2Backbone(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), channels=(256, 512, 1024, 2048), in_chans: int = 3):
        super().__init__()
        self.stem = Stem(in_chans)
        chs = [64, *channels]
        self.stages = nn.Sequential(*[Stage(chs[i], chs[i + 1], 1 if i == 0 else 2, d) for i, d in enumerate(layers)])
        self.num_features = channels[len(layers) - 1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))


class HybridEmbed(nn.Module):
    """ResNet features -> tokens (`patch_size` applies to the feature map; 1 as timm's R26+S/32)."""

    def __init__(self, img_size: int = 224, patch_size: int = 1, in_chans: int = 3, embed_dim: int = 384,
                 layers=(2, 2, 2, 2)):
        super().__init__()
        self.img_size = to_2tuple(img_size)
        self.patch_size = to_2tuple(patch_size)
        self.backbone = ResNetV2Backbone(layers, in_chans=in_chans)
        stride = 2 ** (len(layers) + 1)
        feat = (math.ceil(self.img_size[0] / stride), math.ceil(self.img_size[1] / stride))
        if feat[0] % self.patch_size[0] or feat[1] % self.patch_size[1]:
            raise ValueError(f"feature map {feat} is not divisible by patch_size {self.patch_size}")
        self.grid_size = (feat[0] // self.patch_size[0], feat[1] // self.patch_size[1])
        self.reduction = stride * self.patch_size[0]  # input pixels per token (timm's `feat_ratio`)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(self.backbone.num_features, embed_dim, kernel_size=self.patch_size,
                              stride=self.patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != self.img_size:
            raise ValueError(f"input is {tuple(x.shape[-2:])} px but the model was built for {self.img_size}")
        return self.proj(self.backbone(x)).flatten(2).transpose(1, 2)
