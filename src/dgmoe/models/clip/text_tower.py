"""CLIP's text tower (Radford et al., ICML 2021, §2.4: "a 63M-parameter 12-layer 512-wide model with 8 attention
heads", causal self-attention, "the activations of the highest layer of the transformer at the [EOS] token are
treated as the feature representation of the text which is layer normalized and then linearly projected into the
multi-modal embedding space"), as open_clip's `CLIP.encode_text`: token embedding + position embedding, pre-norm
blocks under a causal mask, the final LayerNorm, the feature at the end token (the largest id, open_clip's
`text.argmax(-1)`), the bias-free projection; and `logit_scale`, the log of the softmax temperature's inverse.

Built from dgmoe's transformer `Block` (timm's names: `blocks.N.attn.qkv`, `mlp.fc1`...) with causal attention,
so that the image tower's weight formats, PEFT targets and QuickGELU/GELU activations carry over. The text
configurations are declared per image tower (`text_config`): OpenAI's weights use QuickGELU, OpenCLIP's GELU;
B/16: width 512, 8 heads, embedding 512; L/14: width 768, 12 heads, embedding 768; both 12 layers, 77 tokens,
49,408 ids. The micro stand-ins' text tower keeps the real configurations' 64-wide heads (width 64, one head,
2 layers) at the micro image towers' 32-d embedding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.errors import UsageError
from dgmoe.models import foundation as fm
from dgmoe.models.clip.tokenizer import CONTEXT_LENGTH
from dgmoe.models.layers import Attention, Block

VOCAB_SIZE = 49408
#: CLIP's initial temperature: logit_scale = log(1 / 0.07) (Radford et al., §2.5)
INIT_LOGIT_SCALE = math.log(1 / 0.07)


@dataclass(frozen=True)
class TextConfig:
    """A CLIP text tower's architecture: width, depth, heads, the embedding it projects to, activation."""

    width: int
    layers: int
    heads: int
    embed_dim: int
    activation: str = "gelu"
    context_length: int = CONTEXT_LENGTH
    vocab_size: int = VOCAB_SIZE
    norm_eps: float = 1e-5


QUICK = "quick_gelu"
OPENAI_B16_TEXT = TextConfig(512, 12, 8, 512, QUICK)
OPENCLIP_B16_TEXT = TextConfig(512, 12, 8, 512)
OPENAI_L14_TEXT = TextConfig(768, 12, 12, 768, QUICK)
OPENCLIP_L14_TEXT = TextConfig(768, 12, 12, 768)
MICRO_OPENAI_TEXT = TextConfig(64, 2, 1, 32, QUICK)
MICRO_OPENCLIP_TEXT = TextConfig(64, 2, 1, 32)
#: the image tower (`ModelInfo.tower` label) -> its text tower; the GMoE/SF-MoE variants share their tower's
TEXT_CONFIGS: dict[str, TextConfig] = {
    fm.OPENAI_B16.label: OPENAI_B16_TEXT, fm.OPENCLIP_B16.label: OPENCLIP_B16_TEXT,
    fm.OPENAI_L14.label: OPENAI_L14_TEXT, fm.OPENCLIP_L14.label: OPENCLIP_L14_TEXT,
    fm.MICRO_OPENAI.label: MICRO_OPENAI_TEXT, fm.MICRO_OPENCLIP.label: MICRO_OPENCLIP_TEXT}
#: towers without released weights: their text tower may start from its random initialisation (tests, smoke)
STAND_INS = (fm.MICRO_OPENAI.label, fm.MICRO_OPENCLIP.label)


def text_config(tower: tuple[str, str] | None, model: str) -> TextConfig:
    """The text tower that goes with an image tower (`ModelInfo.tower`), or a one-line `UsageError`."""
    if tower is None or tower[0] not in TEXT_CONFIGS:
        from dgmoe.names import no_text_tower_message

        raise UsageError(no_text_tower_message(model))
    return TEXT_CONFIGS[tower[0]]


class CausalAttention(Attention):
    """Self-attention where each token sees itself and the tokens before it (CLIP's text mask)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.split_heads(x)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop if self.training else 0.0,
                                           is_causal=True)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(b, n, c)))


class TextTransformer(nn.Module):
    """CLIP's text tower: `forward(tokens)` [B, context] ids -> [B, embed_dim] text features (not normalised),
    open_clip's `encode_text`. Names: `token_embedding`, `positional_embedding`, `blocks.N.*` (timm's), `norm`
    (CLIP's `ln_final`), `proj` (CLIP's `text_projection`, transposed), `logit_scale`."""

    def __init__(self, config: TextConfig):
        super().__init__()
        self.config = config
        width = config.width
        self.token_embedding = nn.Embedding(config.vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.empty(config.context_length, width))
        self.blocks = nn.Sequential(*[Block(width, config.heads, activation=config.activation,
                                            norm_eps=config.norm_eps) for _ in range(config.layers)])
        for block in self.blocks:
            block.attn = CausalAttention(width, config.heads)
        self.norm = nn.LayerNorm(width, eps=config.norm_eps)
        self.proj = nn.Linear(width, config.embed_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(INIT_LOGIT_SCALE))
        self.init_weights()

    def init_weights(self) -> None:
        """open_clip's `TextTransformer.init_parameters`: embeddings N(0, 0.02^2) and N(0, 0.01^2), attention
        and FFN weights by width and depth, the projection N(0, width^-1)."""
        width, layers = self.config.width, self.config.layers
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)
        proj_std, attn_std, fc_std = (width ** -0.5) * ((2 * layers) ** -0.5), width ** -0.5, (2 * width) ** -0.5
        block: Any  # a dgmoe Block: attn.qkv, attn.proj, mlp.fc1, mlp.fc2
        for block in self.blocks:
            nn.init.normal_(block.attn.qkv.weight, std=attn_std)
            nn.init.zeros_(block.attn.qkv.bias)
            nn.init.normal_(block.attn.proj.weight, std=proj_std)
            nn.init.zeros_(block.attn.proj.bias)
            nn.init.normal_(block.mlp.fc1.weight, std=fc_std)
            nn.init.normal_(block.mlp.fc2.weight, std=proj_std)
        nn.init.normal_(self.proj.weight, std=width ** -0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[-1] > self.config.context_length:
            raise ValueError(f"{tokens.shape[-1]} tokens, but the text tower's context is {self.config.context_length}")
        x = self.token_embedding(tokens) + self.positional_embedding[:tokens.shape[-1]]
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        x = x[torch.arange(x.shape[0], device=x.device), tokens.argmax(dim=-1)]  # the end token: the largest id
        return self.proj(x)
