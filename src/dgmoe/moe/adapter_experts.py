"""Expert banks of adapters on a linear projection W0 (d_in -> d_out), one rank per expert, routed by the same
`dgmoe.moe.layer.MoEMlp` (router, gate noise, balance loss, dispatch) as GMoE's FFN experts.

MoA (Lee et al., "Domain Generalization Using Large Pretrained Models with Mixture-of-Adapters", WACV 2025;
its released code, cvlab-kaist/MoA at ed7bc9d, `domainbed/models/lora/lora_util.py`) adds to a frozen W0

    h = W0 x + b0 + sum_e g_e(x) f_e(x) (+ b_A for Kronecker experts),  g = the top-k of softmax(s(x) + eps)

with experts of heterogeneous rank r_e (1, 2, 4, 8) of two kinds:

- `LoRAExperts`: f_e(x) = B_e A_e x (Hu et al. 2021, eq. 3, unscaled as in MoA's code), A_e [r_e, d_in] drawn
  N(0, 1/r_e^2), B_e [d_out, r_e] zero, no bias;
- `KroneckerExperts` (KAdaptation, He et al. 2023, eq. 4-5; a PHM layer, Zhang et al. 2021): f_e(x) = x H_e with
  H_e = sum_{i=1..n} R_i (x) (L_{e,i} R'_{e,i}) [d_in, d_out], (x) the Kronecker product, n = phm_dim (64), the
  n rule matrices R_i = u_i v_i^T [n, n] shared by every layer of the model (`PHMRule`), the low-rank factors
  L_{e,i} [d_in/n, r_e] and R'_{e,i} [r_e, d_out/n] the expert's own (Glorot-uniform, gain sqrt 2, per i), and
  dropout 0.5 on H_e in training (MoA's `kdropout`); b_A [d_out] (zero at start) is added to every token,
  outside the gate.

A bank (`AdapterBank`) is what the dispatch needs of `dgmoe.moe.experts.Experts`: `num_experts`,
`out_features`, `expert(e, x)` and `forward_grouped(x, counts)` (the sorted dispatch: each expert on its own
tokens only, with the counts read back to the host), and `forward_combined(x, weights)`, the sum over every
expert weighted per token, in shapes fixed by (T, N) (`dgmoe.moe.adapter_fixed_shape`, CUDA's path: no host
reads). MoA's code runs every expert on every token and masks (`dgmoe bench layer`'s `moa dense-then-mask`).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

#: MoA's KAdaptation: the PHM dimension n and the dropout on each expert's weight H_e (its code's constants)
PHM_DIM = 64
KRONECKER_DROPOUT = 0.5


class AdapterBank(nn.Module):
    """N adapter experts on a d_in -> d_out projection, each of its own rank (no stacked weights)."""

    num_experts: int
    out_features: int

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward_combined(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_e weights[:, e] f_e(x) for every row of x [T, d_in], weights [T, N] (0 for an expert a token
        does not use): every expert on every token, shapes fixed by (T, N), nothing read back to the host."""
        raise NotImplementedError

    def forward_grouped(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Rows of `x` are grouped by expert (`counts[e]` rows for expert e, in order); an expert without rows
        is not computed."""
        outs = [self.expert(e, chunk) for e, chunk in enumerate(x.split(counts)) if chunk.shape[0]]
        return torch.cat(outs) if outs else x.new_zeros((0, self.out_features))


class LoRAExperts(AdapterBank):
    """N LoRA experts of ranks `ranks` on a d_in -> d_out projection: f_e(x) = B_e A_e x."""

    def __init__(self, in_features: int, out_features: int, ranks: tuple[int, ...]):
        super().__init__()
        self.num_experts, self.in_features, self.out_features, self.ranks = len(ranks), in_features, out_features, ranks
        self.lora_A = nn.ParameterList([nn.Parameter(torch.empty(r, in_features)) for r in ranks])
        self.lora_B = nn.ParameterList([nn.Parameter(torch.zeros(out_features, r)) for r in ranks])
        for r, a in zip(ranks, self.lora_A):
            if not a.is_meta:
                nn.init.normal_(a, std=1.0 / r)  # MoA's code: lora_down ~ N(0, 1/r^2), lora_up = 0

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.lora_A[e]), self.lora_B[e])

    def forward_combined(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_e w_e B_e A_e x = B_cat (w_cols * (A_cat x)): every A stacked [R, d_in] (R the sum of the ranks),
        each expert's r_e columns of A_cat x scaled by its weight, then every B [d_out, R]: two products of
        R columns, the same numbers as the experts one by one."""
        h = F.linear(x, torch.cat(tuple(self.lora_A)))  # [T, R]
        scale = torch.cat([weights[:, e:e + 1].expand(-1, r) for e, r in enumerate(self.ranks)], dim=1)
        return F.linear(h * scale.to(h.dtype), torch.cat(tuple(self.lora_B), dim=1))

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, ranks={list(self.ranks)}"


class PHMRule(nn.Module):
    """KAdaptation's n shared rule matrices R_i = u_i v_i^T [n, n] (u, v ~ U(-0.01, 0.01), as MoA's code)."""

    def __init__(self, phm_dim: int = PHM_DIM):
        super().__init__()
        self.phm_dim = phm_dim
        self.rule_left = nn.Parameter(torch.empty(phm_dim, phm_dim, 1))
        self.rule_right = nn.Parameter(torch.empty(phm_dim, 1, phm_dim))
        if not self.rule_left.is_meta:
            nn.init.uniform_(self.rule_left, -0.01, 0.01)
            nn.init.uniform_(self.rule_right, -0.01, 0.01)

    def forward(self) -> torch.Tensor:
        return torch.bmm(self.rule_left, self.rule_right)  # [n, n, n]


class KroneckerExperts(AdapterBank):
    """N KAdaptation experts of ranks `ranks`: f_e(x) = x H_e, H_e = drop(sum_i R_i (x) L_{e,i} R'_{e,i}).

    `rule` is the model's shared `PHMRule`, held outside this module's parameters (it is registered once, where
    `dgmoe.models.peft` puts it), so every layer's experts use the same R_i."""

    def __init__(self, in_features: int, out_features: int, ranks: tuple[int, ...], rule: PHMRule,
                 dropout: float = KRONECKER_DROPOUT):
        super().__init__()
        n = rule.phm_dim
        if in_features % n or out_features % n:
            raise ValueError(f"Kronecker experts need widths divisible by phm_dim={n}; got {in_features} -> "
                             f"{out_features}")
        self.num_experts, self.in_features, self.out_features, self.ranks = len(ranks), in_features, out_features, ranks
        self._rule = (rule,)  # a tuple: not a registered submodule (one copy per model, not per layer)
        self.left = nn.ParameterList([nn.Parameter(torch.empty(n, in_features // n, r)) for r in ranks])
        self.right = nn.ParameterList([nn.Parameter(torch.empty(n, r, out_features // n)) for r in ranks])
        self.bias = nn.Parameter(torch.zeros(out_features))  # b_A: every token, outside the gate
        self.weight_drop = nn.Dropout(dropout)
        if not self.bias.is_meta:
            with torch.no_grad():
                for w in (*self.left, *self.right):
                    for i in range(n):  # Glorot-uniform per rule index, gain sqrt 2 (MoA's `glorot_uniform`)
                        nn.init.xavier_uniform_(w[i], gain=math.sqrt(2))

    @property
    def rule(self) -> PHMRule:
        return self._rule[0]

    def weight(self, e: int) -> torch.Tensor:
        """H_e [d_in, d_out] = sum_i R_i (x) (L_{e,i} R'_{e,i}), with the training dropout applied."""
        w = torch.bmm(self.left[e], self.right[e])  # [n, d_in/n, d_out/n]
        rules = self.rule().to(w.dtype)  # [n, n, n]
        kron = torch.einsum("iac,ikp->akcp", rules, w)  # [n, d_in/n, n, d_out/n]: sum_i of the Kronecker products
        return self.weight_drop(kron.reshape(self.in_features, self.out_features))

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight(e).to(x.dtype)

    def forward_combined(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_e w_e x H_e = [w_1 x, ..., w_N x] @ [H_1; ...; H_N]: one product of N d_in columns (N times a
        dense projection's FLOPs). Each H_e is formed once, in expert order, so in training every expert draws
        its dropout mask as the sorted dispatch draws it when every expert has tokens."""
        stacked = torch.stack([self.weight(e) for e in range(self.num_experts)]).to(x.dtype)  # [N, d_in, d_out]
        scaled = (weights.to(x.dtype).unsqueeze(-1) * x.unsqueeze(1)).reshape(x.shape[0], -1)  # [T, N * d_in]
        return scaled @ stacked.reshape(-1, self.out_features)

    def extra_repr(self) -> str:
        return (f"{self.in_features} -> {self.out_features}, ranks={list(self.ranks)}, "
                f"phm_dim={self.rule.phm_dim}, weight_dropout={self.weight_drop.p:g}")
