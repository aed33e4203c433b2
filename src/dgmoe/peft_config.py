"""What a parameter-efficient run trains (`--peft` and its knobs), as plain data: no torch, so that the run
config (`dgmoe.engine.config`) and the command line declare and check it without importing the models.
The modules and their application live in `dgmoe.models.peft`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from dgmoe.errors import UsageError

PEFT_MODES = ("full", "linear", "lora", "adapter", "adapter_experts", "moa")
#: the modes whose adapters are routed experts (`dgmoe.moe.layer.MoEMlp` layers)
ROUTED_MODES = ("adapter_experts", "moa")
#: the adapter experts' kinds (`--peft-expert`): bottleneck FFN adapters in parallel with a block's FFN, or
#: LoRA / KAdaptation (Kronecker) experts of one rank each on the `--peft-targets` projections
EXPERT_KINDS = ("bottleneck", "lora", "kadaptation")
#: MoA's experts (cvlab-kaist/MoA ed7bc9d, `domainbed/networks/backbones.py`): KAdaptation experts of ranks
#: 1, 2, 4, 8 on the attention's qkv of every second block (its `where='every_qkv'`: blocks 0, 2, 4, ...)
MOA_EXPERT, MOA_RANKS = "kadaptation", (1, 2, 4, 8)
#: the projections LoRA can target, by the attribute name of the nn.Linear inside a block (timm's names)
LORA_TARGETS = ("qkv", "proj", "fc1", "fc2")
#: `--peft-targets` names -> the projections: the attention's fused q/k/v (LoRA's W_q, W_v choice, §7.1, with
#: timm's fused qkv), the whole attention, the FFN, or all four
TARGET_PRESETS = {"qkv": ("qkv",), "attn": ("qkv", "proj"), "mlp": ("fc1", "fc2"), "all": LORA_TARGETS}
#: the name of the adapter module attached to a block's FFN (`blocks.N.mlp.adapter`)
ADAPTER = "adapter"
LORA_PARAMS = ("lora_A", "lora_B")


@dataclass(frozen=True)
class PeftConfig:
    """What a PEFT run trains (`--peft` and its knobs; the modes: `dgmoe.models.peft`, docs/design.md).

    rank, alpha, dropout: LoRA's r, alpha (the update is scaled by alpha / r) and the dropout on its input
        (also on the adapters' hidden activation).
    targets: the projections LoRA adapts (qkv, proj, fc1, fc2).
    blocks: the block indices that get LoRA/adapters/adapter experts; () = `dgmoe.models.peft.default_blocks`.
    bottleneck: the adapters' hidden width.
    num_experts, top_k, router: the adapter experts' N, k and router ('cosine' or 'linear').
    expert: the adapter experts' kind (`EXPERT_KINDS`); '' = the mode's (bottleneck; `moa`: KAdaptation).
    expert_ranks: one rank per LoRA / KAdaptation expert; () = the mode's (`moa`: 1, 2, 4, 8; else `rank`
        for every expert).
    """

    mode: str = "full"
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("qkv",)
    blocks: tuple[int, ...] = ()
    bottleneck: int = 64
    num_experts: int = 4
    top_k: int = 1
    router: str = "cosine"
    expert: str = ""
    expert_ranks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))
        object.__setattr__(self, "blocks", tuple(self.blocks))
        object.__setattr__(self, "expert_ranks", tuple(self.expert_ranks))
        checks = [
            (self.mode in PEFT_MODES, f"--peft must be one of {', '.join(PEFT_MODES)}; got {self.mode!r}"),
            (self.rank >= 1, f"--peft-rank must be >= 1, got {self.rank}"),
            (self.alpha > 0, f"--peft-alpha must be > 0, got {self.alpha}"),
            (0 <= self.dropout < 1, f"--peft-dropout must be in [0, 1), got {self.dropout}"),
            (bool(self.targets) and all(t in LORA_TARGETS for t in self.targets),
             f"--peft-targets must name projections among {', '.join(LORA_TARGETS)}; got {','.join(self.targets)!r}"),
            (all(b >= 0 for b in self.blocks), f"--peft-blocks must be block indices >= 0, got {list(self.blocks)}"),
            (self.bottleneck >= 1, f"--peft-bottleneck must be >= 1, got {self.bottleneck}"),
            (self.num_experts >= 1, f"--peft-experts must be >= 1, got {self.num_experts}"),
            (1 <= self.top_k <= self.num_experts,
             f"--peft-top-k must be in [1, --peft-experts={self.num_experts}], got {self.top_k}"),
            (self.router in ("cosine", "linear"), f"--peft-router must be cosine or linear, got {self.router!r}"),
            (self.expert in ("", *EXPERT_KINDS),
             f"--peft-expert must be one of {', '.join(EXPERT_KINDS)}; got {self.expert!r}"),
            (all(r >= 1 for r in self.expert_ranks),
             f"--peft-expert-ranks must be >= 1, got {list(self.expert_ranks)}"),
            (self.expert_kind == "bottleneck" or len(self.ranks) == self.num_experts,
             f"--peft-expert-ranks gives {len(self.ranks)} ranks ({','.join(map(str, self.ranks))}) for "
             f"--peft-experts={self.num_experts}: give one rank per expert"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)

    @property
    def active(self) -> bool:
        """True unless every weight trains (`full`)."""
        return self.mode != "full"

    @property
    def routed(self) -> bool:
        """True when the adapters are routed experts (`adapter_experts`, `moa`)."""
        return self.mode in ROUTED_MODES

    @property
    def expert_kind(self) -> str:
        """The adapter experts' kind, the mode's default resolved."""
        return self.expert or (MOA_EXPERT if self.mode == "moa" else "bottleneck")

    @property
    def ranks(self) -> tuple[int, ...]:
        """One rank per LoRA / KAdaptation expert, the mode's default resolved."""
        if self.expert_ranks:
            return self.expert_ranks
        return MOA_RANKS if self.mode == "moa" else (self.rank,) * self.num_experts

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def as_peft(value: PeftConfig | Mapping[str, Any] | str | None) -> PeftConfig | None:
    """A `PeftConfig` from itself, its `to_dict()` (a run's config.json) or a mode name."""
    if value is None or isinstance(value, PeftConfig):
        return value
    if isinstance(value, str):
        return PeftConfig(mode=value)
    return PeftConfig(**dict(value))


def is_trainable(name: str, config: PeftConfig, classifier: str = "head") -> bool:
    """Whether parameter `name` trains under `config`: the rule `apply_peft` sets `requires_grad` by."""
    if not config.active:
        return True
    if name.startswith(classifier + "."):
        return True
    parts = name.split(".")
    if config.mode == "lora":
        return parts[-1] in LORA_PARAMS
    if config.mode == "adapter" or config.routed:
        return ADAPTER in parts[:-1]
    return False
