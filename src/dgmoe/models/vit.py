"""Vision Transformer (Dosovitskiy et al., 2021) with timm's API and parameter names.

One class serves the dense ViT/DeiT, GMoE and SF-MoE: `block_mlps` decides, per block index, whether the
block's FFN is dense (`None`) or a module such as an MoE layer. Stochastic depth rates are computed once
at the top (linear 0 -> drop_path_rate, as timm) and passed down as floats.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

import torch
import torch.nn as nn

from dgmoe.errors import UsageError
from dgmoe.models.layers import Block, Dropout, PatchEmbed
from dgmoe.moe.layer import no_aux_record
from dgmoe.scope import restored, snapshot

if TYPE_CHECKING:
    from dgmoe.models.info import ModelInfo

MlpFactory = Callable[[int], "nn.Module | None"]


def recomputable(block: nn.Module):
    """`block` for activation checkpointing: every call runs in this forward's context (its shard and MoGE
    routing context: the recomputation in backward runs outside them), and only the first call records the
    sparse layers' auxiliary terms (the recomputation would count them twice)."""
    scope, calls = snapshot(), [0]

    def run(x: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        with restored(scope):
            if calls[0] == 1:
                return block(x)
            with no_aux_record():
                return block(x)
    return run


def take_indices(num_levels: int, indices: int | Sequence[int] | None, what: str = "out_indices") -> list[int]:
    """timm's `feature_take_indices`: None = every level, an int n = the last n levels, a sequence = those
    levels (negative ones count from the end); returned sorted and without repeats (network order, the order
    the features come out in). Anything else is a one-line `UsageError` naming `what`."""
    if indices is None:
        indices = num_levels
    if isinstance(indices, bool) or not isinstance(indices, (int, Sequence)) or isinstance(indices, str):
        raise UsageError(f"{what} must be an int n (the last n feature levels) or a sequence of level indices, "
                         f"got {indices!r}")
    if isinstance(indices, int):
        if not 0 < indices <= num_levels:
            raise UsageError(f"{what}={indices} asks for the last {indices} of {num_levels} feature levels; "
                             f"use 1..{num_levels}")
        return list(range(num_levels - indices, num_levels))
    if not indices or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
        raise UsageError(f"{what} must hold level indices (ints), got {indices!r}")
    bad = [i for i in indices if not -num_levels <= i < num_levels]
    if bad:
        raise UsageError(f"{what}={tuple(indices)!r}: {bad[0]} is out of range for {num_levels} feature levels; "
                         f"use 0..{num_levels - 1} (or -{num_levels}..-1 from the end)")
    return sorted({i % num_levels for i in indices})


class VisionTransformer(nn.Module):
    """ViT backbone + linear head.

    Args:
        img_size, patch_size, in_chans: input geometry (any size divisible by the patch).
        num_classes: head outputs; 0 gives an identity head.
        embed_dim, depth, num_heads, mlp_ratio, qkv_bias: architecture (tiny/small/base: 192/384/768, 3/6/12 heads).
        drop_rate: dropout after the position embedding, in FFNs and before the head.
        drop_path_rate: stochastic depth, linearly increasing over blocks.
        global_pool: 'token' (class token, as ViT/DeiT) or 'avg'.
        block_mlps: block index -> FFN module for that block, or None for the dense FFN.
        embed_layer: patch embedding module factory (the hybrid model passes a ResNet stem).
    Foundation-model towers, as timm's options (all off: the ViT/DeiT above, unchanged):
        pre_norm: a LayerNorm `norm_pre` on the embedded tokens, and no patch-embedding bias (CLIP's `ln_pre`).
        activation: the FFN's ('gelu', or 'quick_gelu' for OpenAI's CLIP); norm_eps: every LayerNorm's epsilon.
        init_values: LayerScale ls1/ls2 initialised to this value (CaiT eq. 5, DINOv2); None: none.
        reg_tokens: register tokens `reg_token` after the class token (Darcet et al., ICLR 2024).
        no_embed_class: the position embedding covers the patches only and is added before the prefix tokens
            are concatenated (timm's DINOv2-with-registers layout); otherwise it covers the class token too.
        proj_dim: a bias-free projection `proj` of the pooled feature to this width before the head (CLIP's
            image embedding `visual.proj`); `num_features` is then `proj_dim`.
    """

    uses_metadata = False
    patch_embed: Any  # a PatchEmbed, or a hybrid's ResNet-stem embedding with the same attributes
    info: ModelInfo  # set by the builder (dgmoe.models.builder)

    def __init__(self, img_size: int = 224, patch_size: int = 16, in_chans: int = 3, num_classes: int = 1000,
                 embed_dim: int = 768, depth: int = 12, num_heads: int = 12, mlp_ratio: float = 4.0,
                 qkv_bias: bool = True, drop_rate: float = 0.0, attn_drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, global_pool: Literal["token", "avg"] = "token",
                 block_mlps: MlpFactory | None = None,
                 embed_layer: Callable[..., nn.Module] = PatchEmbed, pre_norm: bool = False,
                 activation: str = "gelu", norm_eps: float = 1e-6, init_values: float | None = None,
                 reg_tokens: int = 0, no_embed_class: bool = False, proj_dim: int | None = None):
        super().__init__()
        if global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool must be 'token' or 'avg', got {global_pool!r}")
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.num_features = self.embed_dim = embed_dim
        self.num_prefix_tokens = 1 + reg_tokens
        self.no_embed_class = no_embed_class
        #: prefix tokens that the position embedding covers (timm: none with `no_embed_class`)
        self.pos_prefix_tokens = 0 if no_embed_class else self.num_prefix_tokens
        bias = {"bias": False} if pre_norm else {}  # timm: PatchEmbed(bias=not pre_norm); CLIP's conv1 has none
        self.patch_embed = embed_layer(img_size=img_size, patch_size=patch_size, in_chans=in_chans,
                                       embed_dim=embed_dim, **bias)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, embed_dim)) if reg_tokens else None
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + self.pos_prefix_tokens,
                                                  embed_dim))
        self.pos_drop = Dropout(drop_rate)
        self.norm_pre: nn.Module = nn.LayerNorm(embed_dim, eps=norm_eps) if pre_norm else nn.Identity()
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth, device="cpu")]  # also under meta
        mlps = block_mlps or (lambda i: None)
        self.blocks = nn.Sequential(*[
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, dpr[i], mlp=mlps(i),
                  init_values=init_values, activation=activation, norm_eps=norm_eps)
            for i in range(depth)
        ])
        self.norm: nn.Module = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.fc_norm: nn.Module = nn.Identity()
        self.proj = nn.Linear(embed_dim, proj_dim, bias=False) if proj_dim else None
        if proj_dim:
            self.num_features = proj_dim
        self.head_drop = Dropout(drop_rate)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        self.grad_checkpointing = False
        #: the dense ViT's own top-level modules and parameters; what a subclass adds (MoGE's location encoder)
        #: has no value in a dense checkpoint (`dgmoe.models.pretrained.no_dense_value`)
        self.dense_names = frozenset(self._modules) | frozenset(self._parameters)
        self.init_weights()

    def init_weights(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        if self.reg_token is not None:
            nn.init.normal_(self.reg_token, std=1e-6)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear) and not name.endswith("router.proj"):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for module in self.modules():
            reset = getattr(module, "reset_parameters_like_timm", None)
            if module is not self and callable(reset):
                reset()

    # ----- timm API ----------------------------------------------------------------------------
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch tokens with the prefix tokens (class, registers) and position embedding, as timm's
        `_pos_embed`, then the pre-norm (CLIP's `ln_pre`; identity elsewhere)."""
        x = self.patch_embed(x)
        prefix = [self.cls_token.expand(x.shape[0], -1, -1)]
        if self.reg_token is not None:
            prefix.append(self.reg_token.expand(x.shape[0], -1, -1))
        if self.no_embed_class:
            x = torch.cat([*prefix, x + self.pos_embed], dim=1)
        else:
            x = torch.cat([*prefix, x], dim=1) + self.pos_embed
        return self.norm_pre(self.pos_drop(x))

    def run_block(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(recomputable(block), x, use_reentrant=False)
        return block(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = self.run_block(block, x)
        return self.norm(x)

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: Literal["NCHW", "NLC"] = "NCHW",
                              intermediates_only: bool = False
                              ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """timm's API: the outputs of blocks `indices` (None: all, int n: the last n), prefix tokens dropped,
        as `[B, C, H, W]` maps at the patch grid (`output_fmt='NCHW'`) or `[B, N, C]` tokens ('NLC'); with
        `norm`, each through the final norm. Returns them alone (`intermediates_only`) or after the final
        normalised tokens, `(tokens, intermediates)`."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take = take_indices(len(self.blocks), indices, "indices")
        x = self.embed(x)
        intermediates = []
        blocks = list(self.blocks)
        for i, block in enumerate(blocks[:take[-1] + 1] if stop_early else blocks):
            x = self.run_block(block, x)
            if i in take:
                intermediates.append(self.norm(x) if norm else x)
        intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if output_fmt == "NCHW":
            h, w = getattr(self.patch_embed, "grid_size")
            intermediates = [y.reshape(y.shape[0], h, w, -1).permute(0, 3, 1, 2).contiguous() for y in intermediates]
        return intermediates if intermediates_only else (self.norm(x), intermediates)

    def prune_intermediate_layers(self, indices: int | Sequence[int] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """timm's API: drop the blocks after the last of `indices` and, optionally, the final norm and the
        head; returns the kept indices (absolute)."""
        take = take_indices(len(self.blocks), indices)
        self.blocks = nn.Sequential(*list(self.blocks)[:take[-1] + 1])
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.fc_norm = nn.Identity()
            self.reset_classifier(0)
        return take

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x[:, self.num_prefix_tokens:].mean(dim=1) if self.global_pool == "avg" else x[:, 0]
        x = self.fc_norm(x)
        if self.proj is not None:
            x = self.proj(x)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
