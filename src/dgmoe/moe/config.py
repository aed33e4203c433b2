"""The configuration of a sparse mixture-of-experts layer: one type for GMoE's and SF-MoE's token routing
and MoGE's image-level metadata routing with a shared expert."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from dgmoe.settings import ConfigError, Settings, setting

DISPATCH_NAMES = ("grouped", "mask")


@dataclass(frozen=True)
class MoEConfig(Settings):
    """Knobs of a sparse MoE FFN (GMoE §4.3, App. C; SF-MoE §2.2; MoGE §2.1, eq. 1; names after V-MoE's
    config where possible), each declared once with its help and constraints (`dgmoe.settings.setting`: the one
    validator); the rules between knobs are checked by hand in `__post_init__`. A model's `--model-kwargs` name
    them as keywords (`KEYWORDS`: a message says `top_k`, not a flag).

    Routing: `routing`, `num_experts`, `top_k`, `router`, `router_dim`, `temperature_init`, `temperature_min`,
    `noise_std`, `renormalize`. Capacity and compute: `capacity_factor`, `batch_prioritized`, `expert_dropout`,
    `dispatch`. Losses: `load_loss`, `cka_tokens`. The shared expert of MoGE eq. 1,
    f(x) = gamma f_0(x) + (1 - gamma) sum_k alpha_k f_k(x): `shared_expert`, `gamma_init`, `supcon_pool`.
    """

    KEYWORDS: ClassVar[bool] = True

    routing: Literal["token", "image"] = setting(
        "token", "'token' routes every token on its own features (GMoE, SF-MoE); 'image' routes whole images on a "
                 "per-image context r = phi(m) that the model provides (MoGE: the location encoding), so all tokens "
                 "of an image share its experts.")
    num_experts: int = setting(6, "N, experts per layer (GMoE: 6).", minimum=1)
    top_k: int = setting(2, "Experts per token or image, at most num_experts. GMoE states top-2 (App. C.1; its "
                            "official code ran k=1); MoGE K = 3.", minimum=1)
    router: Literal["cosine", "linear"] = setting(
        "cosine", "'cosine' (GMoE §4.3, MoGE §2.1) or 'linear' (softmax(W x), eq. 3; SF-MoE).")
    router_dim: int | None = setting(
        256, "d_e, the cosine router's projection width (official GMoE: 256); None routes the input itself (MoGE's "
             "router compares r with the expert codes directly).", minimum=1)
    temperature_init: float = setting(0.5, "The cosine router's learnable tau at initialisation.", minimum=0,
                                      exclusive_min=True)
    temperature_min: float = setting(0.01, "The floor of tau, at most temperature_init.", minimum=0,
                                     exclusive_min=True)
    noise_std: float | None = setting(None, "Std of the Gaussian gate noise added to the logits in training; None "
                                            "means 1/N (App. C.3).")
    renormalize: bool = setting(
        True, "Renormalise the kept top-k gates to sum to one (on by default: the official GMoE code does it for "
              "k > 1 with token routing, and keeps the raw top-1 value for k = 1; image routing does it for every "
              "K, MoGE's alpha being the softmax over the top-K (eq. 1), so K = 1 gives alpha = 1; experts copied "
              "from a pretrained FFN then reproduce that FFN exactly, App. C.2). False keeps eq. 3's raw softmax "
              "values.")
    capacity_factor: float | None = setting(
        None, "None = dropless (default). A float gives per-expert capacity k * int(factor * ceil(T / N)) with "
              "token dropping, as the official GMoE code (1.5); token routing only.", minimum=0, exclusive_min=True)
    batch_prioritized: bool = setting(True, "With a capacity, confident tokens (higher top gate) claim slots first.")
    expert_dropout: float = setting(0.0, "Dropout on the expert hidden activation (official GMoE code: 0.1).",
                                    minimum=0, maximum=1, exclusive_max=True)
    dispatch: Literal["grouped", "mask"] = setting(
        "grouped", "'grouped' (default) or 'mask' (a reference loop with boolean masks, for tests). 'grouped' is one "
                   "interface over several implementations of the same sum, chosen per call by device, dtype, "
                   "compilation and the call's needs (`dgmoe.moe.dispatch.choose_path`): on CUDA, paths with no host "
                   "synchronisation (the grouped-GEMM dispatch on SM90+ in bf16, the Triton kernels where triton is "
                   "installed, else the fixed-shape padded dispatch); on the CPU the sorted per-expert loop with a "
                   "hand-written backward that keeps a dense FFN's activation memory (the fastest measured on CPU, "
                   "docs/benchmarks.md), and the grouped-GEMM dispatch under torch.compile in bf16.",
        choices=DISPATCH_NAMES)
    load_loss: Literal["paper", "tutel", "moa"] = setting(
        "paper", "'paper' computes eq. 10 on logits; 'tutel' reproduces the official GMoE code's quirk of "
                 "subtracting the k-th noisy logit from the clean *probability*; 'moa' reproduces MoA's code "
                 "(cvlab-kaist/MoA ed7bc9d): importance of the clean softmax, load threshold the k-th noisy "
                 "*probability*, unbiased variances (`Gate._moa_balance_loss`).")
    cka_tokens: int = setting(0, "t, tokens of the layer input forced through every expert per forward for MoGE's "
                                 "expert diversity loss (eq. 2); 0 disables it (GMoE, SF-MoE).", minimum=0)
    shared_expert: bool = setting(False, "Add the always-on dense expert f_0 with a learned gamma = sigmoid(g).")
    gamma_init: float = setting(0.5, "gamma at initialisation.", minimum=0, maximum=1, exclusive_min=True,
                                exclusive_max=True)
    supcon_pool: Literal["mean", "cls"] = setting(
        "mean", "How the shared expert's tokens are pooled into the feature MoGE's eq. 3 contrasts ('mean' or "
                "'cls').")

    def __post_init__(self) -> None:
        super().__post_init__()  # every knob against its declaration
        if self.top_k > self.num_experts:  # the knobs that must fit together
            raise ConfigError(f"top_k must be in [1, num_experts={self.num_experts}], got {self.top_k}")
        if self.temperature_min > self.temperature_init:
            raise ConfigError(f"need temperature_min <= temperature_init, got {self.temperature_min}, "
                              f"{self.temperature_init}")
        if self.routing == "image" and self.capacity_factor is not None:
            raise ConfigError("image routing is dropless: capacity_factor must be None")

    @property
    def gate_noise_std(self) -> float:
        return 1.0 / self.num_experts if self.noise_std is None else self.noise_std
