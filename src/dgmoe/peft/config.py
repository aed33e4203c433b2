"""What a parameter-efficient run trains (`--peft` and its knobs), as plain data: no torch, so that the run
config (`dgmoe.engine.config`, its `peft` section) and the command line declare and check it without importing
the models. The modules and their application live in `dgmoe.models.peft`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from dgmoe.settings import ConfigError, Settings, setting

PEFT_MODES = ("full", "linear", "lora", "adapter", "adapter_experts", "moa")
#: the modes whose adapters are routed experts (`dgmoe.moe.layer.MoEMlp` layers)
ROUTED_MODES = ("adapter_experts", "moa")
#: the adapter experts' kinds (`--peft-expert`): bottleneck FFN adapters in parallel with a block's FFN, or
#: LoRA / KAdaptation (Kronecker) experts of one rank each on the `--peft-targets` projections
EXPERT_KINDS = ("bottleneck", "lora", "kadaptation")
#: MoA's experts (cvlab-kaist/MoA ed7bc9d, `domainbed/networks/backbones.py`): KAdaptation experts of ranks
#: 1, 2, 4, 8 on the attention's qkv of every second block (its `where='every_qkv'`: blocks 0, 2, 4, ...)
MOA_EXPERT, MOA_RANKS = "kadaptation", (1, 2, 4, 8)
#: what `--peft moa` fixes (MoA's code): flag key -> (field, MoA's values, its value in words). Its experts are
#: KAdaptation, or LoRA in its Mixture-of-LoRA (`nf_vitbase_moelora_last_qkv`); its blocks vary by configuration
MOA_FIXED: dict[str, tuple[str, tuple[Any, ...], str]] = {
    "peft_expert": ("expert", (None, MOA_EXPERT, "lora"), "kadaptation (or lora, its Mixture-of-LoRA)"),
    "peft_expert_ranks": ("expert_ranks", ((), MOA_RANKS), ",".join(map(str, MOA_RANKS))),
    "peft_experts": ("num_experts", (len(MOA_RANKS),), str(len(MOA_RANKS))),
    "peft_top_k": ("top_k", (1,), "1"),
    "peft_router": ("router", ("cosine",), "cosine"),
    "peft_targets": ("targets", ("qkv",), "qkv"),
}
#: the projections LoRA can target, by the attribute name of the nn.Linear inside a block (timm's names)
LORA_TARGETS = ("qkv", "proj", "fc1", "fc2")
#: `--peft-targets` names -> the projections: the attention's fused q/k/v (LoRA's W_q, W_v choice, §7.1, with
#: timm's fused qkv), the whole attention, the FFN, or all four
TARGET_PRESETS = {"qkv": ("qkv",), "attn": ("qkv", "proj"), "mlp": ("fc1", "fc2"), "all": LORA_TARGETS}
#: every name `targets` may combine: the presets, and each projection alone (a Python caller's or an imported
#: peft adapter's choice, e.g. 'proj,fc1'; the command line offers the presets)
TARGET_NAMES = {**TARGET_PRESETS, **{t: (t,) for t in LORA_TARGETS}}
#: the name of the adapter module attached to a block's FFN (`blocks.N.mlp.adapter`)
ADAPTER = "adapter"
LORA_PARAMS = ("lora_A", "lora_B")


@dataclass(frozen=True)
class PeftConfig(Settings):
    """What a PEFT run trains (`--peft` and its knobs; the modes: `dgmoe.models.peft`, docs/design.md); a run's
    `peft` section, each knob declared once here with its flag.

    mode: the `--peft` mode (`PEFT_MODES`).
    rank, alpha, dropout: LoRA's r, alpha (the update is scaled by alpha / r) and the dropout on its input
        (also on the adapters' hidden activation).
    targets: the projections LoRA adapts: a `TARGET_PRESETS` name (what `--peft-targets` offers), or a comma
        list of those and of single projections (`TARGET_NAMES`, e.g. an imported peft adapter's 'qkv,fc1');
        `projections` resolves it.
    blocks: the block indices that get LoRA/adapters/adapter experts; () = `dgmoe.models.peft.default_blocks`.
    bottleneck: the adapters' hidden width.
    num_experts, top_k, router: the adapter experts' N, k and router ('cosine' or 'linear').
    expert: the adapter experts' kind (`EXPERT_KINDS`); None = the mode's (bottleneck; `moa`: KAdaptation).
    expert_ranks: one rank per LoRA / KAdaptation expert; () = the mode's (`moa`: 1, 2, 4, 8; else `rank`
        for every expert).
    """

    #: its flags also take DomainBed's underscore spellings (`--peft_rank`), as the run's other sections
    DOMAINBED_FLAGS: ClassVar[bool] = True

    mode: str = setting("full", "Parameter-efficient training (docs/design.md, PEFT): full = every weight; linear = "
                                "frozen backbone + head; lora = LoRA on --peft-targets; adapter = bottleneck "
                                "adapters; adapter_experts = routed sparse experts of adapters; moa = MoA's "
                                "KAdaptation experts on every second block's qkv.", key="peft", choices=PEFT_MODES)
    rank: int = setting(8, "LoRA rank r.", key="peft_rank", minimum=1)
    alpha: float = setting(16.0, "LoRA alpha: the update B A x is scaled by alpha / r.", key="peft_alpha", minimum=0,
                           exclusive_min=True)
    dropout: float = setting(0.0, "Dropout on LoRA's input and on the adapters' hidden units.", key="peft_dropout",
                             minimum=0, maximum=1, exclusive_max=True)
    targets: str = setting("qkv", "Projections LoRA adapts: qkv (the fused q/k/v), attn (qkv + proj), mlp (fc1 + "
                                  "fc2) or all.", key="peft_targets", choices=tuple(TARGET_NAMES), commas=True,
                          metavar=f"[{'|'.join(TARGET_PRESETS)}]")
    blocks: tuple[int, ...] = setting((), "Blocks that get LoRA/adapters/adapter experts [every block; "
                                          "adapter_experts: GMoE's last-two, 8 and 10 of 12; moa: every "
                                          "second, 0, 2, ..., 10].", key="peft_blocks", minimum=0)
    bottleneck: int = setting(64, "Hidden width of the adapters and adapter experts.", key="peft_bottleneck",
                              minimum=1)
    num_experts: int = setting(4, "Adapter experts per chosen block (N).", key="peft_experts", minimum=1)
    top_k: int = setting(1, "Adapter experts per token (k).", key="peft_top_k", minimum=1)
    router: str = setting("cosine", "Router of the adapter experts (GMoE's cosine, or linear).", key="peft_router",
                          choices=("cosine", "linear"))
    expert: str | None = setting(None, "Kind of adapter expert: bottleneck (beside the FFN), lora or "
                                       "kadaptation (on --peft-targets) [adapter_experts: bottleneck; moa: "
                                       "kadaptation].", key="peft_expert", choices=EXPERT_KINDS)
    expert_ranks: tuple[int, ...] = setting((), "One rank per LoRA/KAdaptation expert, e.g. 1,2,4,8 "
                                                "[moa: 1,2,4,8; else --peft-rank for each].", key="peft_expert_ranks",
                                            minimum=1)

    def __post_init__(self) -> None:
        super().__post_init__()  # every knob against its declaration (`dgmoe.settings.validate`)
        if self.mode == "moa":  # a changed fixed part is another method under MoA's name
            for key, (name, values, said) in MOA_FIXED.items():
                value = getattr(self, name)
                if value not in values:
                    given = ",".join(map(str, value)) if isinstance(value, tuple) else value
                    raise ConfigError(f"--{key.replace('_', '-')} {given}: --peft moa fixes it to {said} (MoA's "
                                      "configuration); for other routed adapter experts use --peft "
                                      "adapter_experts with --peft-expert, --peft-targets and the other knobs")
        if not self.routed:  # the knobs that must fit together, in the modes that read them
            return
        if self.top_k > self.num_experts:
            raise ConfigError(f"--peft-top-k must be in [1, --peft-experts={self.num_experts}], got {self.top_k}")
        if self.expert_kind != "bottleneck" and len(self.ranks) != self.num_experts:
            raise ConfigError(f"--peft-expert-ranks gives {len(self.ranks)} ranks ({','.join(map(str, self.ranks))}) "
                              f"for --peft-experts={self.num_experts}: give one rank per expert")

    @property
    def active(self) -> bool:
        """True unless every weight trains (`full`)."""
        return self.mode != "full"

    @property
    def routed(self) -> bool:
        """True when the adapters are routed experts (`adapter_experts`, `moa`)."""
        return self.mode in ROUTED_MODES

    @property
    def projections(self) -> tuple[str, ...]:
        """The projections `targets` names, in timm's order (its presets resolved)."""
        named = {t for name in self.targets.split(",") for t in TARGET_NAMES[name]}
        return tuple(t for t in LORA_TARGETS if t in named)

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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PeftConfig":
        """From `to_dict()`, or from the dict older run folders recorded under `model_build.kwargs.peft` (targets
        as a list of projections, '' for the mode's expert)."""
        d = dict(d)
        if isinstance(d.get("targets"), (list, tuple)):
            d["targets"] = targets_setting(d["targets"])
        if d.get("expert") == "":
            d["expert"] = None
        return super().from_dict(d)


def targets_setting(projections: Sequence[str]) -> str:
    """The `targets` value naming `projections`: its preset's name, else their comma list in timm's order."""
    chosen = tuple(t for t in LORA_TARGETS if t in projections)
    return next((name for name, preset in TARGET_PRESETS.items() if preset == chosen), ",".join(projections))


def as_peft(value: PeftConfig | Mapping[str, Any] | str | None) -> PeftConfig | None:
    """A `PeftConfig` from itself (returned as it is), its dict or a mode name."""
    if value is None or isinstance(value, PeftConfig):
        return value
    if isinstance(value, str):
        return PeftConfig(mode=value)
    return PeftConfig.from_dict(value)


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
