"""A whole training forward and backward of GMoE-S/16's, SF-MoE-S/16's and MoGE-S's layer shapes (narrowed,
32 px) reads nothing back to the host when the MoE layers take the paths the one chooser names for a CUDA call
in fp32: the fixed-shape dispatch without triton, the Triton experts and router with it (run here under the
interpreter). The optimizer's step is the engine's, whose CUDA form is counted on the GPU. The same pass with
the chooser's CPU answer (the sorted per-expert dispatch) is caught reading its counts, so the check can fail.
On a GPU, `bench syncs` and tests/moe/kernels/test_kernels_gpu.py count the syncs themselves
(`torch.cuda.set_sync_debug_mode`)."""
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from host_reads import HostReads
from test_kernels_host_reads import HostAten

import dgmoe
import dgmoe.data.geo.metadata as metadata_module
import dgmoe.models.location.encoders as encoders_module
import dgmoe.moe.gate as gate_module
import dgmoe.moe.layer as layer_module
from dgmoe.moe.auxiliary import sparse_layers

NARROW = {"img_size": 32, "embed_dim": 32, "num_heads": 2, "patch_size": 8, "num_classes": 5}
MODELS = ("gmoe_small_patch16_224", "sfmoe_small_patch16_224", "moge_small_patch16_224")


def _as_on_cuda(monkeypatch, triton: bool) -> list[str]:
    """The chooser and the router's switch answer as for a CUDA tensor (the computation stays on the CPU)."""
    chosen: list[str] = []
    choose, fused = layer_module.choose_path, gate_module.fused_router_applies

    def choose_on_cuda(device_type, dtype, compiling, needs):
        chosen.append(choose("cuda", dtype, compiling, dataclasses.replace(needs, triton=triton)))
        return chosen[-1]

    monkeypatch.setattr(layer_module, "choose_path", choose_on_cuda)
    # MoGE's metadata checks: on a CPU they read the answer to name the bad row; on CUDA a device-side assertion
    for module in (metadata_module, encoders_module):
        monkeypatch.setattr(module, "any_bad", lambda bad, what: bool(torch._assert_async(~bad.any(), what)))
    if triton:
        monkeypatch.setattr(gate_module, "fused_router_applies", lambda device, compiling, cfg: fused("cuda", compiling,
                                                                                                       cfg))
    return chosen


def _update_reads(name: str) -> list:
    torch.manual_seed(0)
    model = dgmoe.create_model(name, **NARROW).train()
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 5, (4,))
    meta = {"lat": torch.rand(4) * 160 - 80, "lon": torch.rand(4) * 340 - 170}
    with HostReads() as python_level, HostAten() as aten_level:
        logits = model(x, meta) if getattr(model, "uses_metadata", False) else model(x)
        aux = sum(v for layer in sparse_layers(model).values() for v in layer.aux_losses().values())
        (F.cross_entropy(logits, y) + 0.01 * aux).backward()
    return python_level.calls + [(op, "aten") for op in aten_level.calls]


#: the Triton interpreter's passes over SF-MoE's six sparse layers and MoGE's take about 10 s each: slow
CASES = [(name, triton) if name == MODELS[0] or not triton else pytest.param(name, triton, marks=pytest.mark.slow)
         for name in MODELS for triton in (False, True)]


@pytest.mark.parametrize("name, triton", CASES)
def test_an_fp32_cuda_update_reads_nothing_back(monkeypatch, name, triton):
    if triton:
        pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]')")
    chosen = _as_on_cuda(monkeypatch, triton)
    assert _update_reads(name) == []
    assert chosen and set(chosen) == {"triton" if triton else "fixed_shape"}


def test_the_check_catches_the_cpu_path_of_the_same_update():
    names = {call[0] for call in _update_reads("gmoe_small_patch16_224")}
    assert "bincount" in names or "tolist" in names
