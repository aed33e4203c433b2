"""The one chooser of the expert path (`dgmoe.moe.dispatch.choose_path`): its answer for every device, dtype,
mode and need, written out as a table (plain values, so the CUDA rows run on a CPU), and the layer running
the path it names."""
import itertools

import pytest
import torch
from moe_layers import make_layer

from dgmoe.moe import dispatch as dispatch_module
from dgmoe.moe.dispatch import DispatchNeeds, choose_path

FP32, BF16 = torch.float32, torch.bfloat16


def _needs(device: str, dtype: torch.dtype, **kw) -> DispatchNeeds:
    """A call's needs as the layer states them: torch's grouped GEMM is one fused kernel only on CUDA in bf16
    (SM90+, the GPUs this table stands for)."""
    return DispatchNeeds(fused_grouped_gemm=device == "cuda" and dtype == BF16, **kw)


#: (device, dtype, compiling) -> the path of a training call of GMoE's FFN layer ("grouped", GELU, gradients)
DEFAULT = {
    ("cpu", FP32, False): "sorted_fused", ("cpu", BF16, False): "sorted_fused",
    ("cpu", FP32, True): "sorted_fused", ("cpu", BF16, True): "sync_free",
    ("cuda", FP32, False): "fixed_shape", ("cuda", BF16, False): "sync_free",
    ("cuda", FP32, True): "fixed_shape", ("cuda", BF16, True): "sync_free",
}
#: the same with triton installed: the fused Triton experts run every CUDA call that the bf16 grouped GEMM does
#: not, compiled fp32 included (torch.compile captures their custom operators; before, it fell to the padded
#: path at N/k times the FLOPs)
DEFAULT_TRITON = {**DEFAULT, ("cuda", FP32, False): "triton", ("cuda", FP32, True): "triton"}
#: paths with no host reads (fixed shapes): every CUDA call of the FFN experts takes one
SYNC_FREE_PATHS = {"sync_free", "fixed_shape", "triton"}
#: what only the autograd path implements, and inference
AUTOGRAD_NEEDS = {"no gradients": dict(grad=False), "expert dropout": dict(expert_dropout=True),
                  "twice differentiable": dict(twice_differentiable=True), "quick_gelu": dict(activation="quick_gelu")}
CASES = list(itertools.product(("cpu", "cuda"), (FP32, BF16), (False, True)))


@pytest.mark.parametrize("device, dtype, compiling", CASES)
def test_gmoe_ffn_layer_training_call(device, dtype, compiling):
    assert choose_path(device, dtype, compiling, _needs(device, dtype)) == DEFAULT[device, dtype, compiling]


@pytest.mark.parametrize("need", list(AUTOGRAD_NEEDS))
@pytest.mark.parametrize("device, dtype, compiling", CASES)
def test_what_the_fused_function_lacks_takes_autograd_unless_the_grouped_gemm_runs(device, dtype, compiling, need):
    """The sync-free dispatch is plain autograd (dropout, any activation, no-grad all work through it): where it
    runs by default it keeps running; elsewhere these needs leave the fused sorted function for autograd."""
    path = choose_path(device, dtype, compiling, _needs(device, dtype, **AUTOGRAD_NEEDS[need]))
    default = DEFAULT[device, dtype, compiling]
    assert path == (default if default in SYNC_FREE_PATHS else "sorted_autograd")


@pytest.mark.parametrize("device, dtype, compiling", CASES)
def test_with_triton_eager_cuda_calls_take_the_fused_kernels(device, dtype, compiling):
    assert choose_path(device, dtype, compiling, _needs(device, dtype, triton=True)) == \
        DEFAULT_TRITON[device, dtype, compiling]
    # bf16 on a GPU without a fused grouped GEMM (before SM90) takes the kernels too, and fp16, eager or compiled
    # (compiled bf16 takes torch's grouped GEMM, which the graph captures)
    needs = DispatchNeeds(fused_grouped_gemm=False, triton=True)
    assert choose_path("cuda", BF16, False, needs) == "triton"
    assert choose_path("cuda", torch.float16, False, needs) == "triton"
    assert choose_path("cuda", torch.float16, True, needs) == "triton"
    assert choose_path("cuda", BF16, True, needs) == "sync_free"
    assert choose_path("cuda", BF16, True, DispatchNeeds(grouped_mm=False, triton=True)) == "triton"


@pytest.mark.parametrize("need, path", [("no gradients", "triton"), ("quick_gelu", "triton"),
                                        ("expert dropout", "fixed_shape"), ("twice differentiable", "fixed_shape")])
def test_what_the_kernels_lack_takes_the_fixed_shape_path_on_cuda(need, path):
    """The kernels fuse GELU and QuickGELU and one backward; expert dropout and double backward leave them for
    the fixed-shape dispatch (plain autograd, still no host reads), never for a sorted path."""
    needs = _needs("cuda", FP32, triton=True, **AUTOGRAD_NEEDS[need])
    for compiling in (False, True):
        assert choose_path("cuda", FP32, compiling, needs) == path
        relu = _needs("cuda", FP32, triton=True, activation="relu")
        assert choose_path("cuda", FP32, compiling, relu) == "fixed_shape"


def test_no_cuda_call_of_ffn_experts_takes_a_path_that_reads_counts_back():
    for needs in (dict(), dict(triton=True), *AUTOGRAD_NEEDS.values(), dict(grouped_mm=False)):
        for dtype, compiling in itertools.product((FP32, BF16, torch.float16), (False, True)):
            assert choose_path("cuda", dtype, compiling, _needs("cuda", dtype, **needs)) in SYNC_FREE_PATHS


@pytest.mark.parametrize("device, dtype, compiling", CASES)
def test_adapter_banks_take_the_fixed_shape_combine_on_cuda_and_the_autograd_loop_elsewhere(device, dtype, compiling):
    """LoRA / KAdaptation banks: no CUDA call reads counts back (whatever else it needs); the CPU keeps the
    sorted loop, which computes k of the N experts per token."""
    for extra in ({}, *AUTOGRAD_NEEDS.values(), dict(triton=True), dict(grouped_mm=False)):
        needs = _needs(device, dtype, ffn_experts=False, **extra)
        assert choose_path(device, dtype, compiling, needs) == \
            ("adapter_fixed_shape" if device == "cuda" else "sorted_autograd")


@pytest.mark.parametrize("ffn", [True, False])
@pytest.mark.parametrize("device, dtype, compiling", CASES)
def test_the_mask_option_is_the_reference_everywhere(device, dtype, compiling, ffn):
    assert choose_path(device, dtype, compiling, _needs(device, dtype, option="mask", ffn_experts=ffn)) == "mask"


def test_a_torch_without_grouped_mm_never_takes_the_sync_free_path():
    for device, dtype, compiling in CASES:
        needs = DispatchNeeds(grouped_mm=False, fused_grouped_gemm=False)
        assert choose_path(device, dtype, compiling, needs) == ("fixed_shape" if device == "cuda" else "sorted_fused")


def test_the_layer_states_its_needs_and_runs_the_chosen_path(monkeypatch):
    """`MoEMlp` asks the chooser with its real needs: on this CPU, sorted_fused in training, autograd without
    gradients or with expert dropout, the mask reference for 'mask', and sync_free in bf16 once the grouped
    GEMM counts as fused (as on an SM90+ GPU)."""
    ran: list[str] = []
    for path, fn in list(dispatch_module.PATHS.items()):
        monkeypatch.setitem(dispatch_module.PATHS, path, lambda *a, _fn=fn, _path=path: ran.append(_path) or _fn(*a))
    x = torch.randn(2, 3, 8)
    make_layer().train()(x)
    with torch.no_grad():
        make_layer().train()(x)
    make_layer(expert_dropout=0.1).train()(x)
    make_layer(dispatch="mask").train()(x)
    make_layer(activation="quick_gelu").train()(x)
    assert ran == ["sorted_fused", "sorted_autograd", "sorted_autograd", "mask", "sorted_autograd"]
    ran.clear()
    monkeypatch.setattr(dispatch_module, "fused_grouped_gemm", lambda device, dtype: dtype == torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        make_layer().train()(x)
    make_layer().train()(x)
    assert ran == ["sync_free", "sorted_fused"]
