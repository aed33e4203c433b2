"""Adapter experts on CUDA read nothing back to the host: the adapter banks' fixed-shape dispatch alone
(LoRA and KAdaptation, forward and backward, with and without capacity), and a whole training forward and
backward of `--peft moa` and `--peft adapter_experts` models (LoRA, KAdaptation and bottleneck experts) with the
chooser answering as for a CUDA call in fp32, under the two watchers the FFN experts' checks use (Python-level
reads and aten operations that need device values). The same update with the chooser's CPU answer (the sorted
loop) is caught reading its counts, so the check can fail."""
import pytest
import torch
import torch.nn.functional as F
from cuda_syncs import step_makes_no_sync
from host_reads import HostReads
from test_kernels_host_reads import HostAten
from test_kernels_train_step_host_reads import _as_on_cuda

import dgmoe
from dgmoe.moe.adapter_experts import KroneckerExperts, LoRAExperts, PHMRule
from dgmoe.moe.adapter_fixed_shape import adapter_fixed_shape_dispatch
from dgmoe.moe.auxiliary import sparse_layers
from dgmoe.moe.dispatch import capacity_keep_mask, sorted_autograd_dispatch
from dgmoe.peft.config import PeftConfig

TOY = dict(num_classes=5, img_size=16, patch_size=4, depth=2, embed_dim=32, num_heads=2)
#: a model per expert kind: MoA (KAdaptation on qkv, top-1), LoRA experts on qkv and fc2 (top-2), and
#: GMoE-flavoured bottleneck experts beside the FFN (top-2), with the path a CUDA call of each takes
MODELS = {"moa": (PeftConfig("moa"), "adapter_fixed_shape"),
          "lora": (PeftConfig("adapter_experts", expert="lora", expert_ranks=(1, 2, 4), num_experts=3, top_k=2,
                              targets="qkv,fc2"), "adapter_fixed_shape"),
          "bottleneck": (PeftConfig("adapter_experts", bottleneck=8, num_experts=3, top_k=2), "fixed_shape")}


def _bank(kind: str):
    torch.manual_seed(0)
    if kind == "lora":
        return LoRAExperts(16, 24, (1, 2, 4, 3))
    return KroneckerExperts(16, 24, (1, 2, 4, 8), PHMRule(4))


def _dispatch_reads(dispatch, kind: str, keep: bool) -> list:
    bank = _bank(kind).train()
    x = torch.randn(20, 16, requires_grad=True)
    idx = torch.stack([torch.randperm(3)[:2] for _ in range(20)])  # the fourth expert gets no token
    gates = torch.rand(20, 2, requires_grad=True)
    mask = capacity_keep_mask(idx, gates, 4, 8) if keep else None
    with HostReads() as python_level, HostAten() as aten_level:
        dispatch(x, idx, gates, bank, mask).sum().backward()
    return python_level.calls + [(name, "aten") for name in aten_level.calls]


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("kind", ["lora", "kadaptation"])
def test_the_adapter_fixed_shape_dispatch_reads_nothing_back(kind, keep):
    assert _dispatch_reads(adapter_fixed_shape_dispatch, kind, keep) == []


@pytest.mark.parametrize("kind", ["lora", "kadaptation"])
def test_the_check_catches_the_sorted_loop_reading_its_counts(kind):
    names = {name for name, _ in _dispatch_reads(sorted_autograd_dispatch, kind, False)}
    assert {"bincount", "tolist"} <= names


def _update_reads(peft: PeftConfig) -> list:
    torch.manual_seed(0)
    model = dgmoe.create_model("vit_tiny_patch16_224", peft=peft, **TOY).train()
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))
    with HostReads() as python_level, HostAten() as aten_level:
        aux = 0.0
        logits = model(x)
        for layer in sparse_layers(model).values():
            aux = aux + sum(layer.aux_losses().values())
        (F.cross_entropy(logits, y) + 0.01 * aux).backward()
    return python_level.calls + [(op, "aten") for op in aten_level.calls]


@pytest.mark.parametrize("name", list(MODELS))
def test_an_fp32_cuda_update_of_adapter_experts_reads_nothing_back(monkeypatch, name):
    peft, path = MODELS[name]
    chosen = _as_on_cuda(monkeypatch, triton=False)
    assert _update_reads(peft) == []
    assert chosen and set(chosen) == {path}


@pytest.mark.parametrize("name", ["moa", "lora"])
def test_the_check_catches_the_cpu_path_of_the_same_update(name):
    names = {call[0] for call in _update_reads(MODELS[name][0])}
    assert {"bincount", "tolist"} <= names


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_on_a_gpu_an_adapter_expert_training_step_makes_no_host_sync(name, precision):
    """ViT-S/16 at 224 px with each kind of adapter experts: a training step (after a first) under
    `set_sync_debug_mode("error")`, which raises at any host synchronisation."""
    step_makes_no_sync("vit_small_patch16_224", precision, {"peft": MODELS[name][0]})
