"""Every algorithm under every parameter-efficient mode (`--peft`) on toy foundation towers: only the intended
weights train, the optimisers receive only those, 3 steps give finite losses, and a reload continues
identically, on a CLIP-shaped tower (pre-norm, QuickGELU, final projection) and a DINOv2-shaped one (LayerScale,
register tokens). MoGE, whose losses need its own network, runs on its tiny MoGE."""
import math

import pytest
import torch
from test_algorithms_train import (
    FAST,
    NUM_CLASSES,
    NUM_DOMAINS,
    compatible,
    load,
    minibatches,
    predictions,
    save,
    tiny,
    train,
)

from dgmoe.algorithms import get_algorithm, list_algorithms
from dgmoe.engine.hparams import default_hparams
from dgmoe.models.info import model_info
from dgmoe.moe.auxiliary import sparse_layers
from dgmoe.peft.config import PEFT_MODES, PeftConfig

ALGORITHMS = [name for name in list_algorithms() if not get_algorithm(name).NEEDS_TEXT_HEAD]  # as test_algorithms_train
MODES = [m for m in PEFT_MODES if m != "full"]  # full fine-tuning is the existing contract test's
#: the names each mode trains (every other weight is frozen)
TRAINED = {"linear": ("head.",), "lora": ("head.", "lora_A", "lora_B"), "adapter": ("head.", ".adapter."),
           "adapter_experts": ("head.", ".adapter."), "moa": ("head.", "adapter.")}  # moa: the model's PHM rule too
PEFT = {"adapter_experts": dict(bottleneck=8, num_experts=3, top_k=2, router="cosine"),
        "adapter": dict(bottleneck=8), "lora": dict(rank=2, targets=("qkv", "fc2"))}


#: the tower of each shape, built at toy size by `tiny` (16 px, 2 blocks of width 32)
TOWERS = {"clip": "vit_base_patch16_clip_quickgelu_224", "dinov2": "vit_small_patch14_reg4_dinov2"}


def backbone(name, shape="clip"):
    return "moge_tiny_patch16_224" if name == "MoGE" else TOWERS[shape]


def peft_config(mode):
    return PeftConfig(mode=mode, **PEFT.get(mode, {}))


def build(name, mode, seed=0, shape="clip"):
    network = tiny(backbone(name, shape), seed, peft_config(mode))
    hp = default_hparams(name, "PACS", model_info(network))
    hp.update({k: v for k, v in FAST.items() if k in hp})
    return get_algorithm(name)(network, NUM_CLASSES, NUM_DOMAINS, hp)


def intended(name, mode):
    return any(part in name for part in TRAINED[mode])


@pytest.mark.parametrize("mode", MODES)
def test_only_the_intended_parameters_receive_gradients(mode):
    alg = build("ERM", mode)
    seen = {}
    step = alg.optimizer.step

    def spy(*a, **k):
        seen.update({n: p.grad is not None for n, p in alg.network.named_parameters()})
        return step(*a, **k)

    alg.optimizer.step = spy
    alg.update(minibatches(0), 0)
    trained = sorted(n for n, has in seen.items() if has)
    assert trained == sorted(n for n in seen if intended(n, mode)), trained
    assert all(intended(n, mode) == p.requires_grad for n, p in alg.network.named_parameters())
    if mode == "adapter_experts":  # the experts and their routers train, the backbone's FFN does not
        assert any(".adapter.router." in n for n in trained) and any(".adapter.experts." in n for n in trained)
        assert "blocks.1.mlp.fc1.weight" not in trained
    if mode != "linear":
        assert any(not n.startswith("head.") for n in trained)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_optimisers_receive_only_trainable_parameters(name):
    alg = build(name, "lora")
    frozen = {id(p) for p in alg.network.parameters() if not p.requires_grad}
    for opt in alg.optimizers().values():
        groups = getattr(opt, "param_groups", [])
        assert not any(id(p) in frozen for g in groups for p in g["params"]), name


# every algorithm x every mode x both tower shapes: 3 steps, finite losses, a reload that continues identically
#: `moa` in the default suite: algorithms that copy the network (SWAD), clone it (Fish, MLDG), differentiate
#: gradients (IGA) or add a feature penalty (CORAL); every other algorithm under `-m slow`
MOA_FAST = ("ERM", "SWAD", "Fish", "MLDG", "IGA", "CORAL")
MATRIX = [(n, m, shape) if m != "moa" or (n in MOA_FAST and shape == "clip")
          else pytest.param(n, m, shape, marks=pytest.mark.slow)
          for shape in TOWERS for n in ALGORITHMS for m in MODES
          if compatible(n, backbone(n, shape)) and not (shape == "dinov2" and n == "MoGE")]


@pytest.mark.parametrize("name,mode,shape", MATRIX)
def test_trains_under_peft_and_reloads_identically(name, mode, shape):
    alg = build(name, mode, shape=shape)
    frozen = {n: p.detach().clone() for n, p in alg.network.named_parameters() if not intended(n, mode)}
    outs = train(alg, 3)
    for out in outs:
        assert out and all(math.isfinite(v) for v in out.values()), out
    for n, p in alg.network.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), f"{name}: frozen {n} changed"
    if mode in ("adapter_experts", "moa"):
        assert any(n.endswith(".adapter") for n in sparse_layers(alg.network))
        assert any(o.get("loss_aux", 0.0) > 0 for o in outs), "the adapter experts' balance loss never added"
    x = minibatches(99)[0]
    before = predictions(alg, x)
    blob = save(alg)
    fresh = build(name, mode, seed=1, shape=shape)
    load(fresh, blob)
    assert torch.equal(predictions(fresh, x), before)
    assert train(alg, 1, start=3) == train(fresh, 1, start=3)
    assert torch.equal(predictions(alg, x), predictions(fresh, x))
