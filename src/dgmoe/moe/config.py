"""Configuration of one sparse MoE layer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


DISPATCH_NAMES = ("auto", "grouped", "grouped_autograd", "padded", "mask")


@dataclass(frozen=True)
class MoEConfig:
    """Knobs of a token-level MoE FFN (GMoE §4.3, App. C; names after V-MoE's config where possible).

    Attributes:
        num_experts: N, experts per MoE layer (GMoE: 6).
        top_k: experts per token. The paper states top-2 (App. C.1); the official code ran k=1.
        router: 'cosine' (GMoE §4.3) or 'linear' (softmax(W x), eq. 3).
        router_dim: d_e, the cosine router's projection width (official: 256).
        temperature_init, temperature_min: the cosine router's learnable tau (official: 0.5, floor 0.01).
        noise_std: std of the Gaussian gate noise added to the logits in training; None means 1/N (App. C.3).
        renormalize: renormalise the kept top-k gates to sum to one. On by default: it is what the official
            code (Tutel, k>1) does and it makes experts copied from a pretrained FFN reproduce that FFN
            exactly at initialisation (App. C.2). The paper's eq. 3 keeps raw softmax values (False).
        capacity_factor: None = dropless (default). A float gives per-expert capacity
            k * int(factor * ceil(T / N)) with token dropping, as the official code (1.5).
        batch_prioritized: with a capacity, confident tokens (higher top gate) claim slots first.
        expert_dropout: dropout on the expert hidden activation (official code: 0.1).
        load_loss: 'paper' computes eq. 10 on logits; 'tutel' reproduces the official code's quirk of
            subtracting the k-th noisy logit from the clean *probability*.
        dispatch: 'grouped' (default: sort by expert, one matmul pair per expert on contiguous rows, with a
            hand-written backward that keeps a dense FFN's activation memory; the fastest on a quiet 2-core
            CPU, see docs/benchmarks.md), 'grouped_autograd' (the same through autograd: double backward,
            expert dropout), 'padded' (one batched matmul pair over
            experts padded to the busiest one), 'auto' (padded while routing is balanced, else grouped) or
            'mask' (a reference loop with boolean masks, for tests and benchmarks).
    """

    num_experts: int = 6
    top_k: int = 2
    router: Literal["cosine", "linear"] = "cosine"
    router_dim: int = 256
    temperature_init: float = 0.5
    temperature_min: float = 0.01
    noise_std: float | None = None
    renormalize: bool = True
    capacity_factor: float | None = None
    batch_prioritized: bool = True
    expert_dropout: float = 0.0
    load_loss: Literal["paper", "tutel"] = "paper"
    dispatch: Literal["auto", "grouped", "grouped_autograd", "padded", "mask"] = "grouped"

    def __post_init__(self) -> None:
        if self.num_experts < 1:
            raise ValueError(f"num_experts must be >= 1, got {self.num_experts}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"top_k must be in [1, num_experts={self.num_experts}], got {self.top_k}")
        if self.router not in ("cosine", "linear"):
            raise ValueError(f"router must be 'cosine' or 'linear', got {self.router!r}")
        if self.capacity_factor is not None and self.capacity_factor <= 0:
            raise ValueError(f"capacity_factor must be positive or None, got {self.capacity_factor}")
        if self.load_loss not in ("paper", "tutel"):
            raise ValueError(f"load_loss must be 'paper' or 'tutel', got {self.load_loss!r}")
        if self.dispatch not in DISPATCH_NAMES:
            raise ValueError(f"dispatch must be one of {', '.join(DISPATCH_NAMES)}; got {self.dispatch!r}")

    @property
    def gate_noise_std(self) -> float:
        return 1.0 / self.num_experts if self.noise_std is None else self.noise_std
