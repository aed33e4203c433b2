"""dgmoe's MoA layer against numbers recorded from MoA's own code (cvlab-kaist/MoA at ed7bc9d,
tests/parity/fixtures/moa_layers.*; regenerate with the command in the JSON, see record_moa.py): with MoA's
weights, inputs, gate noise and weight-dropout masks, `dgmoe.models.peft.routed_linear` under `--peft moa`
gives MoA's outputs, auxiliary loss and gradients within 1e-6 (fp32), for KAdaptation and LoRA experts, in
training and evaluation mode; and `--peft moa` on ViT-B/16 trains what MoA's model trains."""
import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from safetensors.torch import load_file

import dgmoe.moe.gate as moe_gate
from dgmoe.models.info import build_on_meta
from dgmoe.models.peft import RoutedAdapterLinear, routed_linear
from dgmoe.moe.adapter_experts import KroneckerExperts, PHMRule
from dgmoe.peft.config import PeftConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures"
META = json.loads((FIXTURES / "moa_layers.json").read_text())
T = load_file(str(FIXTURES / "moa_layers.safetensors"))
KINDS = ("kadaptation", "lora")
ATOL = 1e-6


def close(ours: torch.Tensor, moa: torch.Tensor, name: str) -> None:
    """Within 1e-6 absolute, or, for a tensor with entries above 1 (the Kronecker factors' gradients reach 5),
    within 1e-6 of its largest entry: the fp32 floor of the two codes' different summation orders (MoA sums
    n materialised Kronecker products, dgmoe contracts them in one einsum); measured: 1.8e-6 at 5.2."""
    tol = ATOL * max(1.0, moa.abs().max().item())
    torch.testing.assert_close(ours, moa, rtol=0, atol=tol, msg=lambda m: f"{name}: {m}")


def _names(kind: str) -> dict[str, str]:
    """MoA's parameter names -> dgmoe's (`rule.` = the shared PHM rule)."""
    router = {"router.temperature": "adapter.router.logit_scale", "router.sim_matrix": "adapter.router.codebook",
              "router.cosine_projector.weight": "adapter.router.proj.weight",
              "router.cosine_projector.bias": "adapter.router.proj.bias"}
    if kind == "lora":
        experts = {**{f"lora_down.{e}.weight": f"adapter.experts.lora_A.{e}" for e in range(4)},
                   **{f"lora_up.{e}.weight": f"adapter.experts.lora_B.{e}" for e in range(4)}}
        return {"linear.weight": "weight", "linear.bias": "bias", **router, **experts}
    experts = {**{f"proj_adapter1_left.{e}": f"adapter.experts.left.{e}" for e in range(4)},
               **{f"proj_adapter1_right.{e}": f"adapter.experts.right.{e}" for e in range(4)},
               "b_adapter.0": "adapter.experts.bias"}
    return {"weight": "weight", "bias": "bias", "phm_rule1_left": "rule.rule_left",
            "phm_rule1_right": "rule.rule_right", **router, **experts}


def build(kind: str) -> tuple[RoutedAdapterLinear, dict[str, nn.Parameter]]:
    rule = PHMRule(64)
    layer = routed_linear(nn.Linear(META["dim"], META["out"]), PeftConfig("moa", expert=kind), rule)
    params = {**dict(layer.named_parameters()), **{f"rule.{n}": p for n, p in rule.named_parameters()}}
    with torch.no_grad():
        for moa, ours in _names(kind).items():
            params[ours].copy_(T[f"{kind}.weight.{moa}"].reshape(params[ours].shape))
    layer.weight.requires_grad_(False)
    layer.bias.requires_grad_(False)
    return layer, params


def run(kind: str, train: bool, monkeypatch) -> tuple[RoutedAdapterLinear, dict, torch.Tensor, torch.Tensor]:
    layer, params = build(kind)
    layer.train(train)
    noise = T["noise"]
    monkeypatch.setattr(moe_gate, "per_sample", lambda shape, draw, like: noise.reshape(shape).clone())
    bank = layer.adapter.experts
    if isinstance(bank, KroneckerExperts):  # MoA's dropout masks on each expert's weight H_e
        weight, p = KroneckerExperts.weight, bank.weight_drop.p
        bank.weight_drop = nn.Identity()
        masks = [T[f"mask.{e}"].float() for e in range(4)]
        bank.weight = (lambda e: weight(bank, e) * masks[e] / (1 - p)) if train else (lambda e: weight(bank, e))
    x = T["x"].clone().requires_grad_(True)
    out = layer(x)
    aux = layer.adapter.aux_losses().get("balance", torch.zeros(())) if train else torch.zeros(())
    ((out * T["cot"]).sum() + 0.01 * aux).backward()  # MoA's layer weights its loss by 0.01 inside
    return layer, params, out, x


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", KINDS)
def test_outputs_and_gradients_equal_moas_within_1e6(kind, train, monkeypatch):
    case = f"{kind}.{'train' if train else 'eval'}"
    layer, params, out, x = run(kind, train, monkeypatch)
    close(out, T[f"{case}.out"], "out")
    close(x.grad, T[f"{case}.grad.x"], "x.grad")
    compared = 0
    for moa, ours in _names(kind).items():
        key = f"{case}.grad.{moa}"
        if key in T:
            grad = params[ours].grad  # None: an expert no token chose (MoA's dense layer gives it zeros)
            grad = torch.zeros_like(params[ours]) if grad is None else grad
            close(grad.reshape(T[key].shape), T[key], ours)
            compared += 1
    assert compared == len(_names(kind)) - 2  # every trainable parameter (all but the frozen W0, b0)


@pytest.mark.parametrize("kind", KINDS)
def test_the_balance_loss_is_moas_and_the_routing_uses_several_experts(kind, monkeypatch):
    layer, _, _, _ = run(kind, True, monkeypatch)
    aux = 0.01 * layer.adapter.aux_losses()["balance"]
    moa = T[f"{kind}.train.aux_loss"]
    torch.testing.assert_close(aux.detach(), moa, rtol=1e-4, atol=0)  # relative: the loss itself is ~1e-5
    gate = layer.adapter.router
    routing = gate.route(T["x"].reshape(-1, META["dim"]), tuple(T["x"].shape[:-1]))
    assert len(routing.expert_idx.unique()) >= 2
    # dgmoe's GMoE-paper balance loss (population variances, noisy importance, logit threshold) is not MoA's
    gate.config = dataclasses.replace(gate.config, load_loss="paper")
    assert (gate.balance_loss(routing) * 0.01 - moa).abs() > 0.1 * moa


def test_vit_b16_trains_what_moas_model_trains():
    """MoA's trainable count on timm's ViT-B/16 (its own injection, recorded), less the phm_rule0 pair it
    registers but never reads, equals dgmoe's `--peft moa` adapters, routers and rule; the classifier is the
    head each puts on its own features (dgmoe's: on the CLIP tower's projection)."""
    counts = META["vit_b16_trainable"]
    assert counts["kadaptation.blocks"] == [0, 2, 4, 6, 8, 10] and counts["lora.blocks"] == [10, 11]
    for kind, blocks in (("kadaptation", ()), ("lora", (10, 11))):
        model = build_on_meta("vit_base_patch16_clip_224", peft=PeftConfig("moa", expert=kind, blocks=blocks),
                              num_classes=7)
        adapters = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and not n.startswith("head."))
        assert adapters == counts[f"{kind}.requires_grad"] - counts[f"{kind}.unused"], kind
