"""Parameter-efficient training: which weights of a built model train, and the small modules that do.

Applied once, by the model factory (`create_model(..., peft=...)`), after pretrained weights are loaded, so
every algorithm trains the same parameters (its optimisers receive the trainable ones only). Generic over
timm's ViT module names (`blocks.N.attn.qkv`, `attn.proj`, `mlp.fc1`, `mlp.fc2`, the classifier named by
`ModelInfo.classifier`), so any backbone built from `dgmoe.models.layers` gets it unchanged. Modes:

- `full`: every weight trains (DomainBed's fine-tuning; nothing changes).
- `linear`: a linear probe: the backbone is frozen, only the classifier trains.
- `lora`: LoRA (Hu et al. 2021, eq. 3 and §4.1): each target projection computes
  h = W0 x + (alpha / r) B A x with W0 frozen, A [r, d_in] random (Kaiming-uniform, as LoRA's code) and
  B [d_out, r] zero, so the model is unchanged at initialisation.
- `adapter`: a bottleneck adapter (Houlsby et al. 2019's down-GELU-up, zero-initialised up-projection) in
  parallel with each chosen block's FFN (He et al. 2022's parallel form): FFN(x) + up(GELU(down(x))).
- `adapter_experts`: sparse experts of adapters (GMoE's layer on a frozen backbone): N bottleneck adapters per
  chosen block, in parallel with its FFN and routed per token by dgmoe's own MoE layer (`dgmoe.moe.layer.MoEMlp`:
  GMoE eq. 3 y = sum_{e in TOP_k} g_e(x) f_e(x), g = softmax(s(x) + eps), the cosine or linear router, gate noise
  1/N, the 0.5 (L_imp + L_load) balance loss of App. C.4 added by every algorithm as for GMoE's layers,
  routing recorded for `dgmoe analyze routing`). Each expert's up-projection starts at zero. With
  `--peft-expert lora` or `kadaptation` the experts are instead LoRA or KAdaptation (Kronecker) adapters of one
  rank each (`--peft-expert-ranks`) on each `--peft-targets` projection (timm's names: the attention's qkv,
  proj, the FFN's fc1, fc2): h = W0 x + b0 + sum_{e in TOP_k} g_e(x) f_e(x) (`dgmoe.moe.adapter_experts`).
- `moa`: MoA as its code runs it (Lee et al., WACV 2025; cvlab-kaist/MoA ed7bc9d, its best configuration
  `nf_vitbase_moek_every_qkv_new --l_aux`): 4 KAdaptation experts of ranks 1, 2, 4, 8 (phm_dim 64, one PHM
  rule shared by the model, dropout 0.5 on each expert's weight) on the qkv projection of every second block
  (0, 2, 4, ...), GMoE's cosine router (projection 256, tau 0.5), top-1 of the noisy softmax (noise 1/N), and
  its code's balance loss (`MoEConfig.load_loss='moa'`) weighted 0.01 and summed over layers. Its experts are
  not zero at initialisation (KAdaptation's Glorot-initialised factors; the rule starts at U(-0.01, 0.01)).

The classifier trains in every mode but `full` (where everything does). Which names train is a rule on the
parameter names (`is_trainable`), so copies (SWAD's averaged network) are saved the same way.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.errors import UsageError
from dgmoe.models.layout import resolve_layout, sparse_blocks
from dgmoe.moe.adapter_experts import PHM_DIM, KroneckerExperts, LoRAExperts, PHMRule
from dgmoe.moe.config import MoEConfig
from dgmoe.moe.experts import Experts
from dgmoe.moe.layer import MoEMlp
from dgmoe.peft.config import ADAPTER, LORA_TARGETS, PeftConfig, is_trainable


class LoRALinear(nn.Linear):
    """nn.Linear plus LoRA's low-rank update (Hu et al. 2021, eq. 3): h = W0 x + b + (alpha / r) B A drop(x).
    Keeps nn.Linear's `weight`/`bias` names, so the base weights load and save under timm's names."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0):
        nn.Module.__init__(self)  # nn.Linear's own constructor would allocate a weight only to drop it
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.rank, self.scaling = rank, alpha / rank
        device, dtype = base.weight.device, base.weight.dtype
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, device=device, dtype=dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=device, dtype=dtype))
        if not self.lora_A.is_meta:
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # LoRA's reference code; B = 0 (§4.1)
        self.lora_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B)
        return F.linear(x, self.weight, self.bias) + self.scaling * update

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, scaling={self.scaling:g}"


class Adapter(nn.Module):
    """A bottleneck adapter: up(drop(GELU(down(x)))) with `up` zero-initialised (Houlsby et al. 2019), so that
    adding it leaves the model unchanged at initialisation."""

    def __init__(self, dim: int, bottleneck: int, dropout: float = 0.0):
        super().__init__()
        self.down = nn.Linear(dim, bottleneck)
        self.act = nn.GELU()
        self.drop = nn.Dropout(dropout)
        self.up = nn.Linear(bottleneck, dim)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.drop(self.act(self.down(x))))


def adapter_experts(dim: int, config: PeftConfig) -> MoEMlp:
    """N bottleneck adapters (dim -> bottleneck -> dim, GELU) routed per token by an `MoEMlp`; every expert's
    up-projection zero, so the layer adds nothing at initialisation (its router still learns from the
    balance loss)."""
    moe = MoEConfig(num_experts=config.num_experts, top_k=config.top_k, router=config.router)  # type: ignore[arg-type]
    layer = MoEMlp(dim, config.bottleneck, moe)  # token routing, dropless, gate noise 1/N (GMoE App. C.3)
    experts = layer.experts
    assert isinstance(experts, Experts)  # the FFN experts MoEMlp builds by default
    with torch.no_grad():
        experts.fc2_weight.zero_()
        experts.fc2_bias.zero_()
    return layer


class RoutedAdapterLinear(nn.Linear):
    """nn.Linear plus routed adapter experts on it: h = W0 x + b0 + MoE(x) (+ the Kronecker experts' b_A).
    Keeps nn.Linear's `weight`/`bias` names (timm's), so the base weights load and save as before; the experts,
    their router and balance loss are the `MoEMlp` at `.adapter`."""

    adapter: MoEMlp  # the name is `ADAPTER`, what `is_trainable` looks for

    def __init__(self, base: nn.Linear, adapter: MoEMlp):
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight, self.bias = base.weight, base.bias
        self.adapter = adapter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias) + self.adapter(x)
        extra = getattr(self.adapter.experts, "bias", None)
        return out if extra is None else out + extra.to(out.dtype)


def routed_linear(base: nn.Linear, config: PeftConfig, rule: PHMRule | None = None) -> RoutedAdapterLinear:
    """`base` with `config`'s LoRA or KAdaptation experts (one rank each) routed per token; `rule` is the
    model's shared PHM rule (Kronecker experts)."""
    ranks, kind = config.ranks, config.expert_kind
    if kind == "lora":
        bank: LoRAExperts | KroneckerExperts = LoRAExperts(base.in_features, base.out_features, ranks)
    elif rule is None:
        raise ValueError("Kronecker experts need the model's PHM rule")
    else:
        bank = KroneckerExperts(base.in_features, base.out_features, ranks, rule)
    moe = MoEConfig(num_experts=len(ranks), top_k=config.top_k, router=config.router,  # type: ignore[arg-type]
                    load_loss="moa" if config.mode == "moa" else "paper")
    return RoutedAdapterLinear(base, MoEMlp(base.in_features, 0, moe, experts=bank))


def _phm_dim(widths: list[int]) -> int:
    """MoA's phm_dim (64), or for layers narrower than that (test-sized models) the largest power of two that
    divides every adapted width."""
    n = PHM_DIM
    while n > 1 and any(w % n for w in widths):
        n //= 2
    return n


def with_parallel_adapter(ffn: nn.Module, adapter: nn.Module) -> nn.Module:
    """`ffn` with `adapter` in parallel, FFN(x) + adapter(x): dgmoe's FFNs (`Mlp`, `MoEMlp`) hold an optional
    `adapter` and add it in their own forward, so the FFN keeps its class and parameter names
    (`blocks.N.mlp.fc1.weight`, the adapter's `blocks.N.mlp.adapter.*`) and no hook is involved. Returns `ffn`."""
    if getattr(ffn, ADAPTER, False) is not None:  # (absent: not one of dgmoe's FFNs; set: adapted already)
        raise UsageError(f"--peft adds an adapter beside dgmoe's FFNs (Mlp, MoEMlp); {type(ffn).__name__} "
                         "has no adapter slot or has one already")
    setattr(ffn, ADAPTER, adapter)
    return ffn


def default_blocks(mode: str, depth: int) -> tuple[int, ...]:
    """The blocks a mode adapts when `--peft-blocks` is not given: every block, but GMoE's last-two placement
    for adapter experts (§4.3: blocks depth-4 and depth-2, `dgmoe.models.layout`; every block of a toy model
    shallower than 4) and MoA's every second block for `moa`."""
    if mode == "moa":  # MoA's `where='every_qkv'`: the qkv of every second block, from the first
        return tuple(range(0, depth, 2))
    if mode != "adapter_experts" or depth < 4:
        return tuple(range(depth))
    return sparse_blocks(resolve_layout("last-two", depth))


def _chosen_blocks(model: nn.Module, config: PeftConfig) -> list[tuple[int, nn.Module]]:
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Sequential):
        raise UsageError(f"--peft {config.mode} adapts transformer blocks (model.blocks); "
                         f"{type(model).__name__} has none: use --peft linear or full")
    bad = [b for b in config.blocks if b >= len(blocks)]
    if bad:
        raise UsageError(f"--peft-blocks {bad[0]} is out of range for a {len(blocks)}-block model")
    chosen = config.blocks or default_blocks(config.mode, len(blocks))
    return [(i, blocks[i]) for i in chosen]


def _classifier_name(model: nn.Module) -> str:
    info = getattr(model, "info", None)
    return getattr(info, "classifier", "head")


def apply_peft(model: nn.Module, config: PeftConfig) -> nn.Module:
    """Add `config`'s modules to `model` in place and freeze every other weight; returns `model`, whose `info`
    carries the config (`peft`) from then on. One walk over the chosen blocks finds what to adapt (`_targets`);
    each module found is replaced by what `_wrap` makes of it."""
    setattr(model, "info", dataclasses.replace(getattr(model, "info"), peft=config))  # (`ModelInfo`)
    if not config.active:
        return model
    if config.mode != "linear":  # every mode but the linear probe wraps modules of the chosen blocks
        found = _targets(model, config)
        device = next(found[0][3].parameters()).device
        rule = None
        if config.routed and config.expert_kind == "kadaptation":  # one PHM rule, shared by the model
            with torch.device(device):
                rule = PHMRule(_phm_dim([w for *_, c in found for w in _widths(c)]))
            model.add_module(ADAPTER, rule)
        for block, parent, attr, module in found:
            with torch.device(device):
                setattr(parent, attr, _wrap(block, module, config, rule))
    classifier = _classifier_name(model)
    for name, p in model.named_parameters():
        p.requires_grad_(is_trainable(name, config, classifier))
    return model


def _widths(linear: nn.Module) -> tuple[int, int]:
    """(d_in, d_out) of a projection `_targets` found."""
    assert isinstance(linear, nn.Linear)
    return linear.in_features, linear.out_features


def _on_ffn(config: PeftConfig) -> bool:
    """Whether `config`'s adapters sit in parallel with a block's FFN (bottleneck adapters and their experts)
    rather than on its projections (LoRA, LoRA / KAdaptation experts)."""
    return config.mode == "adapter" or (config.routed and config.expert_kind == "bottleneck")


def _targets(model: nn.Module, config: PeftConfig) -> list[tuple[nn.Module, nn.Module, str, nn.Module]]:
    """The one walk over the chosen blocks' named modules: (block, parent, attribute, module) of each module that
    `config` wraps, in the blocks' order: the FFN itself (`mlp`: adapters in parallel with it), or each dense
    nn.Linear named in `config.projections` directly inside the attention or the FFN (never a router's)."""
    on_ffn, found = _on_ffn(config), []
    for _, block in _chosen_blocks(model, config):
        for name, module in block.named_modules():
            parent, _, attr = name.rpartition(".")
            if (name == "mlp") if on_ffn else (parent in ("attn", "mlp") and attr in config.projections
                                                and type(module) is nn.Linear):
                found.append((block, block.get_submodule(parent), attr, module))
    if not found and on_ffn:
        raise UsageError(f"--peft {config.mode} adds adapters beside the blocks' FFN (block.mlp); the chosen "
                         f"blocks of {type(model).__name__} have none: use --peft lora, linear or full")
    if not found:
        raise UsageError(f"--peft-targets {config.targets} matches no dense nn.Linear projection of "
                         f"the chosen blocks (sparse FFNs have no fc1/fc2); choose among {', '.join(LORA_TARGETS)}")
    return found


def _wrap(block: nn.Module, module: nn.Module, config: PeftConfig, rule: PHMRule | None) -> nn.Module:
    """What takes `module`'s place: its LoRA layer, its routed LoRA / KAdaptation experts (`rule`: the model's
    shared PHM rule), or the FFN with its bottleneck adapter or adapter experts in parallel."""
    if _on_ffn(config):
        dim = getattr(block, "norm2").normalized_shape[0]  # the FFN's width
        adapter = (Adapter(dim, config.bottleneck, config.dropout) if config.mode == "adapter"
                   else adapter_experts(dim, config))
        return with_parallel_adapter(module, adapter)
    assert isinstance(module, nn.Linear)
    if config.mode == "lora":
        return LoRALinear(module, config.rank, config.alpha, config.dropout)
    return routed_linear(module, config, rule)


def peft_of(model: nn.Module) -> PeftConfig | None:
    """The PEFT config a model was built with (its `info.peft`), or None (none was applied)."""
    return getattr(getattr(model, "info", None), "peft", None)


def base_of(model: nn.Module) -> dict[str, str] | None:
    """The base weights a PEFT model names (its `info.base_weights`: `base_weights`), or None."""
    return getattr(getattr(model, "info", None), "base_weights", None)


def trainable_names(model: nn.Module) -> list[str]:
    """The names of the parameters that train under the model's PEFT config (all of them without one)."""
    config, classifier = peft_of(model), _classifier_name(model)
    return [n for n, _ in model.named_parameters() if config is None or is_trainable(n, config, classifier)]


def trainable_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights a PEFT checkpoint holds: the trainable parameters (by the name rule, so also for frozen
    copies such as SWAD's average)."""
    state, keep = model.state_dict(), set(trainable_names(model))
    return {k: v for k, v in state.items() if k in keep}


def parameter_counts(model: nn.Module) -> tuple[int, int]:
    """(total, trainable) parameter counts of a model (trainable: `requires_grad`)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def base_weights(name: str, pretrained: str | Path | None) -> dict[str, str]:
    """What a PEFT checkpoint names as the weights it needs: the registered model, the pretrained file it
    was built from ('' for none: the base is the seeded random initialisation) and that file's sha256."""
    if not pretrained:
        return {"base_model": name, "base_pretrained": "", "base_sha256": ""}
    return {"base_model": name, "base_pretrained": str(pretrained), "base_sha256": file_sha256(pretrained)}
