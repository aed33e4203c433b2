"""The configuration of a sparse mixture-of-experts layer: one type for GMoE's and SF-MoE's token routing
and MoGE's image-level metadata routing with a shared expert."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DISPATCH_NAMES = ("grouped", "mask")


@dataclass(frozen=True)
class MoEConfig:
    """Knobs of a sparse MoE FFN (GMoE §4.3, App. C; SF-MoE §2.2; MoGE §2.1, eq. 1; names after V-MoE's
    config where possible).

    Routing:
        routing: 'token' routes every token on its own features (GMoE, SF-MoE); 'image' routes whole images
            on a per-image context r = phi(m) that the model provides (MoGE: the location encoding), so all
            tokens of an image share its experts.
        num_experts: N, experts per layer (GMoE: 6).
        top_k: experts per token or image. GMoE states top-2 (App. C.1; its official code ran k=1); MoGE K = 3.
        router: 'cosine' (GMoE §4.3, MoGE §2.1) or 'linear' (softmax(W x), eq. 3; SF-MoE).
        router_dim: d_e, the cosine router's projection width (official GMoE: 256); None routes the input
            itself (MoGE's router compares r with the expert codes directly).
        temperature_init, temperature_min: the cosine router's learnable tau (0.5, floor 0.01).
        noise_std: std of the Gaussian gate noise added to the logits in training; None means 1/N (App. C.3).
        renormalize: renormalise the kept top-k gates to sum to one (on by default: the official GMoE code does
            it for k > 1 with token routing, and keeps the raw top-1 value for k = 1; image routing does it for
            every K, MoGE's alpha being the softmax over the top-K (eq. 1), so K = 1 gives alpha = 1; experts
            copied from a pretrained FFN then reproduce that FFN exactly, App. C.2). False keeps eq. 3's raw
            softmax values.
    Capacity and compute:
        capacity_factor: None = dropless (default). A float gives per-expert capacity
            k * int(factor * ceil(T / N)) with token dropping, as the official GMoE code (1.5).
        batch_prioritized: with a capacity, confident tokens (higher top gate) claim slots first.
        expert_dropout: dropout on the expert hidden activation (official GMoE code: 0.1).
        dispatch: 'grouped' (default) or 'mask' (a reference loop with boolean masks, for tests). 'grouped'
            is one interface over two implementations of the same sum, chosen per call by device, dtype and
            compilation (`dgmoe.moe.dispatch.choose_path`): the sync-free grouped-GEMM dispatch (fixed shapes,
            no host synchronisation) on GPUs with a fused grouped GEMM (SM90+, bf16) and under torch.compile in
            bf16; elsewhere the sorted per-expert loop with a hand-written backward that keeps a dense FFN's
            activation memory (the fastest measured on CPU, docs/benchmarks.md).
    Losses:
        load_loss: 'paper' computes eq. 10 on logits; 'tutel' reproduces the official GMoE code's quirk of
            subtracting the k-th noisy logit from the clean *probability*; 'moa' reproduces MoA's code
            (cvlab-kaist/MoA ed7bc9d): importance of the clean softmax, load threshold the k-th noisy
            *probability*, unbiased variances (`Gate._moa_balance_loss`).
        cka_tokens: t, tokens of the layer input forced through every expert per forward for MoGE's expert
            diversity loss (eq. 2); 0 disables it (GMoE, SF-MoE).
    Shared expert (MoGE eq. 1): f(x) = gamma f_0(x) + (1 - gamma) sum_k alpha_k f_k(x):
        shared_expert: add the always-on dense expert f_0 with a learned gamma = sigmoid(g).
        gamma_init: gamma at initialisation.
        supcon_pool: how the shared expert's tokens are pooled into the feature MoGE's eq. 3 contrasts
            ('mean' or 'cls').
    """

    routing: Literal["token", "image"] = "token"
    num_experts: int = 6
    top_k: int = 2
    router: Literal["cosine", "linear"] = "cosine"
    router_dim: int | None = 256
    temperature_init: float = 0.5
    temperature_min: float = 0.01
    noise_std: float | None = None
    renormalize: bool = True
    capacity_factor: float | None = None
    batch_prioritized: bool = True
    expert_dropout: float = 0.0
    dispatch: Literal["grouped", "mask"] = "grouped"
    load_loss: Literal["paper", "tutel", "moa"] = "paper"
    cka_tokens: int = 0
    shared_expert: bool = False
    gamma_init: float = 0.5
    supcon_pool: Literal["mean", "cls"] = "mean"

    def __post_init__(self) -> None:
        checks = [
            (self.routing in ("token", "image"), f"routing must be 'token' or 'image', got {self.routing!r}"),
            (self.num_experts >= 1, f"num_experts must be >= 1, got {self.num_experts}"),
            (1 <= self.top_k <= self.num_experts,
             f"top_k must be in [1, num_experts={self.num_experts}], got {self.top_k}"),
            (self.router in ("cosine", "linear"), f"router must be 'cosine' or 'linear', got {self.router!r}"),
            (self.router_dim is None or self.router_dim >= 1,
             f"router_dim must be >= 1 or None, got {self.router_dim}"),
            (0 < self.temperature_min <= self.temperature_init,
             f"need 0 < temperature_min <= temperature_init, got {self.temperature_min}, {self.temperature_init}"),
            (self.capacity_factor is None or self.capacity_factor > 0,
             f"capacity_factor must be positive or None, got {self.capacity_factor}"),
            (0 <= self.expert_dropout < 1, f"expert_dropout must be in [0, 1), got {self.expert_dropout}"),
            (self.dispatch in DISPATCH_NAMES, f"dispatch must be one of {', '.join(DISPATCH_NAMES)}; got "
                                              f"{self.dispatch!r}"),
            (self.load_loss in ("paper", "tutel", "moa"),
             f"load_loss must be 'paper', 'tutel' or 'moa', got {self.load_loss!r}"),
            (self.cka_tokens >= 0, f"cka_tokens must be >= 0, got {self.cka_tokens}"),
            (0.0 < self.gamma_init < 1.0, f"gamma_init must be in (0, 1), got {self.gamma_init}"),
            (self.supcon_pool in ("mean", "cls"), f"supcon_pool must be 'mean' or 'cls', got {self.supcon_pool!r}"),
            (self.routing == "token" or self.capacity_factor is None,
             "image routing is dropless: capacity_factor must be None"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def gate_noise_std(self) -> float:
        return 1.0 / self.num_experts if self.noise_std is None else self.noise_std
