"""Record MoA's own numbers for tests/parity/test_moa_parity.py, from its released code run as it is:

    git -C <MoA clone> archive ed7bc9d | tar -x -C /work/moa-ed7bc9d   # cvlab-kaist/MoA at ed7bc9d
    pip install --no-deps --target /work/peers-moa einops               # the one import lora_util adds
    PYTHONPATH=/work/peers:/work/peers-moa python tests/parity/record_moa.py /work/moa-ed7bc9d

(/work/peers: timm 1.0.31, for the ViT-B/16 count; MoA pins timm 0.8.19.dev0, which is not on PyPI; both name
the attention `Attention` with Linear children qkv, proj, which is all MoA's injection looks at.)

Writes tests/parity/fixtures/moa_layers.safetensors (weights, inputs, fixed gate noise and weight-dropout masks,
MoA's outputs, auxiliary losses and gradients) and moa_layers.json (peer commit, versions, this command, the
cases, what every tensor is, and MoA's trainable-parameter counts on a ViT-B/16 with random weights).
Cases, for both of MoA's expert kinds (`K_Linear_MoE_new_`: KAdaptation experts; `MOELoraInjectedLinear`:
LoRA experts; ranks 1, 2, 4, 8, on a 128 -> 384 projection, a qkv of width 128):
- train: training mode, the gate noise (its `torch.randn_like`) and KAdaptation's weight-dropout masks fixed
  to stored tensors; output, `aux_loss`, and the gradients of sum(out * cot) + aux_loss;
- eval: evaluation mode (no noise, no dropout); output and the gradients of sum(out * cot).
This file is not a test module (pytest does not collect it) and does not import dgmoe.
"""
from __future__ import annotations

import importlib.util
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

FIXTURES = Path(__file__).resolve().parent / "fixtures"
COMMIT = "ed7bc9d5fa05f0912a245294c953cfabf2f0f940"
COMMAND = "PYTHONPATH=/work/peers:/work/peers-moa python tests/parity/record_moa.py /work/moa-ed7bc9d"
DIM, OUT, TOKENS, RANKS = 128, 384, (2, 5), [1, 2, 4, 8]


def _normal(seed: int, shape, scale: float) -> torch.Tensor:
    return torch.from_numpy((np.random.RandomState(seed).standard_normal(shape) * scale).astype(np.float32))


def _load_lora_util(root: Path):
    spec = importlib.util.spec_from_file_location("moa_lora_util", root / "domainbed/models/lora/lora_util.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FixedDropout(nn.Module):
    """Applies stored keep-masks in call order (MoA's `set_H` calls its dropout once per expert, 0..3)."""

    def __init__(self, masks: list[torch.Tensor], p: float):
        super().__init__()
        self.masks, self.p, self.calls = masks, p, 0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return h
        mask = self.masks[self.calls % len(self.masks)].to(h.dtype)
        self.calls += 1
        return h * mask / (1 - self.p)


def _params(layer: nn.Module, kind: str) -> dict[str, nn.Parameter]:
    # the shared rule MoA's forward uses is phm_rule1; its injection also sets phm_rule0, which no forward reads
    return {n: p for n, p in layer.named_parameters() if not n.startswith("phm_rule0")}


def build(lu, kind: str) -> tuple[nn.Module, dict[str, nn.Parameter]]:
    torch.manual_seed(0)
    if kind == "kadaptation":
        layer = lu.K_Linear_MoE_new_(DIM, OUT)
        for key, value in lu.set_phm_rule_new().items():
            setattr(layer, key, value)
    else:
        layer = lu.MOELoraInjectedLinear(DIM, OUT, True, list(RANKS))
    params = _params(layer, kind)
    for name in ("weight", "bias", "linear.weight", "linear.bias"):  # the frozen W0, b0 (as its injection leaves them)
        if name in params:
            params[name].requires_grad_(False)
    with torch.no_grad():  # every weight from its own seed (LoRA's up-projections non-zero, so every path counts)
        for i, (name, p) in enumerate(sorted(params.items())):
            if name.endswith("temperature"):
                p.fill_(float(np.log(1 / 0.5)))
            elif "phm_rule" in name:
                p.copy_(_normal(100 + i, p.shape, 0.3))
            else:
                p.copy_(_normal(100 + i, p.shape, 0.05 if "weight" in name or "sim" in name else 0.1))
    return layer, params


def run(layer: nn.Module, params: dict[str, nn.Parameter], x: torch.Tensor, cot: torch.Tensor, noise: torch.Tensor,
        train: bool) -> dict[str, torch.Tensor]:
    layer.train(train)
    for p in params.values():
        p.grad = None
    x = x.clone().requires_grad_(True)
    randn_like = torch.randn_like
    torch.randn_like = lambda t, *a, **k: noise.clone()  # MoA draws its gate noise with torch.randn_like
    try:
        out = layer(x)
    finally:
        torch.randn_like = randn_like
    loss = (out * cot).sum() + (layer.aux_loss if train else 0.0)
    loss.backward()
    result = {"out": out.detach(), "grad.x": x.grad.detach()}
    if train:
        result["aux_loss"] = layer.aux_loss.detach().reshape(())
    for name, p in params.items():
        if p.requires_grad:
            result[f"grad.{name}"] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    return result


def vit_b16_counts(lu) -> dict[str, int]:
    """MoA's trainable parameters on timm's `vit_base_patch16_clip_224` (random weights; the head an Identity,
    as its `get_backbone`), for its two mixtures: every parameter with requires_grad, and those its loss reaches
    (its KAdaptation model also registers phm_rule0, which no forward reads)."""
    import timm

    counts = {}
    for kind, inject, where in (("kadaptation", lu.inject_trainable_moe_kronecker_new, "every_qkv"),
                                ("lora", lu.inject_trainable_moe_lora, "last_qkv")):
        torch.manual_seed(0)
        net = timm.create_model("vit_base_patch16_clip_224.laion2b", pretrained=False)
        net.head = nn.Identity()
        for p in net.parameters():
            p.requires_grad = False
        inject(net, r=list(RANKS), where=where)
        trainable = {n: p for n, p in net.named_parameters() if p.requires_grad}
        counts[f"{kind}.requires_grad"] = sum(p.numel() for p in trainable.values())
        counts[f"{kind}.unused"] = sum(p.numel() for n, p in trainable.items() if n.startswith("phm_rule0"))
        counts[f"{kind}.blocks"] = sorted({int(n.split(".")[1]) for n in trainable if n.startswith("blocks.")})
        counts["num_features"] = net.num_features
        counts["timm"] = timm.__version__
    return counts


def main(root: Path) -> None:
    from safetensors.torch import save_file

    lu = _load_lora_util(root)
    x = _normal(1, (*TOKENS, DIM), 1.0)
    cot = _normal(2, (*TOKENS, OUT), 1.0)
    noise = _normal(3, (TOKENS[0] * TOKENS[1], len(RANKS)), 1.0)
    masks = [(torch.from_numpy(np.random.RandomState(10 + e).rand(DIM, OUT)) > 0.5).to(torch.uint8) for e in range(4)]
    tensors: dict[str, torch.Tensor] = {"x": x, "cot": cot, "noise": noise}
    described = {"x": f"the layer input [{TOKENS[0]}, {TOKENS[1]}, {DIM}]", "cot": "the output's cotangent",
                 "noise": "the standard-normal gate noise (MoA scales it by 1/4)"}
    for e, m in enumerate(masks):
        tensors[f"mask.{e}"] = m
        described[f"mask.{e}"] = f"the keep-mask of KAdaptation's weight dropout (p 0.5) on expert {e}'s H"
    for kind in ("kadaptation", "lora"):
        layer, params = build(lu, kind)
        if kind == "kadaptation":
            layer.kdropout = FixedDropout(masks, 0.5)
        for name, p in params.items():
            tensors[f"{kind}.weight.{name}"] = p.detach().clone()
            described[f"{kind}.weight.{name}"] = f"MoA's {name} (its module's names)"
        for case in ("train", "eval"):
            for key, value in run(layer, params, x, cot, noise, case == "train").items():
                tensors[f"{kind}.{case}.{key}"] = value
                described[f"{kind}.{case}.{key}"] = f"MoA's {key} in {case} mode"
    missing = set(tensors) ^ set(described)
    if missing:
        raise RuntimeError(f"tensors without a description or descriptions without a tensor: {sorted(missing)}")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = {"peer": "MoA (cvlab-kaist/MoA)", "peer_commit": COMMIT, "peer_checkout_head": head or "(an archive)",
            "peer_files": ["domainbed/models/lora/lora_util.py", "domainbed/networks/backbones.py"],
            "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "command": COMMAND, "dim": DIM, "out": OUT, "tokens": list(TOKENS), "ranks": RANKS,
            "vit_b16_trainable": vit_b16_counts(lu), "tensors": described}
    FIXTURES.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().clone() for k, v in tensors.items()}, str(FIXTURES / "moa_layers.safetensors"))
    (FIXTURES / "moa_layers.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/work/moa-ed7bc9d"))
