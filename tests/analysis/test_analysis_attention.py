"""Attention maps of the last block and the head-redundancy score."""
import math

import pytest
import torch
import torch.nn as nn

from dgmoe.analysis.attention import (
    attention_weights,
    cls_attention_maps,
    head_redundancy,
    pairwise_head_similarity,
)


def test_redundancy_hand_values():
    # head 1 puts all mass on patch 0, head 2 splits it over patches 0 and 1
    maps = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    assert head_redundancy(maps, "cosine") == pytest.approx(1 / math.sqrt(2))
    # JS in bits: KL(p||m) = log2(4/3), KL(q||m) = .5 log2(2/3) + .5 log2(2); 1 - (KL + KL)/2
    js = 0.5 * (math.log2(4 / 3) + 0.5 * math.log2(2 / 3) + 0.5)
    assert head_redundancy(maps, "js") == pytest.approx(1 - js)


def test_redundancy_extremes_and_averaging():
    same = torch.full((2, 3, 2, 2), 0.25)
    assert head_redundancy(same, "cosine") == pytest.approx(1.0)
    assert head_redundancy(same, "js") == pytest.approx(1.0)
    disjoint = torch.eye(3).reshape(1, 3, 3)
    assert head_redundancy(disjoint, "cosine") == pytest.approx(0.0)
    assert head_redundancy(disjoint, "js") == pytest.approx(0.0)
    # mean over images: one redundant image (1) and one disjoint image (0)
    both = torch.cat([torch.full((1, 3, 3), 1 / 3), disjoint])
    assert head_redundancy(both, "cosine") == pytest.approx(0.5)
    sim = pairwise_head_similarity(disjoint)
    assert torch.allclose(sim[0], torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="metric"):
        head_redundancy(same, "l2")


class TinyAttn(nn.Module):
    """timm-style attention without `attention_weights`, to exercise the qkv fallback."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.num_heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Identity()

    def forward(self, x):
        return x


class TinyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = TinyAttn()

    def forward(self, x):
        return self.attn(x)


class TinyViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(TinyBlock(), TinyBlock())

    def forward(self, x):
        return self.blocks(x)


def test_attention_from_qkv_matches_manual_softmax():
    torch.manual_seed(0)
    model = TinyViT()
    x = torch.randn(2, 5, 8)
    w = attention_weights(model, x, block=-1)
    q, k, _ = model.blocks[1].attn.qkv(x).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
    manual = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
    assert w.shape == (2, 2, 5, 5)
    assert torch.allclose(w, manual, atol=1e-6)


def test_cls_maps_shape_and_validation():
    w = torch.softmax(torch.randn(2, 3, 5, 5), -1)
    maps = cls_attention_maps(w, (2, 2))
    assert maps.shape == (2, 3, 2, 2)
    assert torch.allclose(maps[1, 2].reshape(-1), w[1, 2, 0, 1:])
    with pytest.raises(ValueError, match="patch grid"):
        cls_attention_maps(w, (3, 3))


def test_vit_last_block_attention_rows_sum_to_one():
    from dgmoe.models import create_model

    torch.manual_seed(0)
    model = create_model("vit_tiny_patch16_224", num_classes=3, img_size=32, patch_size=8)
    model.train()
    w = attention_weights(model, torch.randn(2, 3, 32, 32))
    assert w.shape == (2, 3, 17, 17)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 17))
    assert model.training  # restored
    maps = cls_attention_maps(w, tuple(model.patch_embed.grid_size))
    assert 0.0 <= head_redundancy(maps) <= 1.0
