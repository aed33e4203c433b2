"""The fp32 paths meant for CUDA read nothing back to the host: the fixed-shape dispatch, the Triton
dispatch and the fused router, forward and backward, under two watchers (a `TorchFunctionMode` that records
Python-level reads such as `.tolist()` and `bincount`, and a `TorchDispatchMode` that records the aten
operations whose result needs device values on the host). The same check flags the sorted per-expert
dispatch, which reads each expert's count (so it can fail)."""
import pytest
import torch
from host_reads import HostReads
from torch.utils._python_dispatch import TorchDispatchMode

from dgmoe.moe.dispatch import capacity_keep_mask, sorted_dispatch
from dgmoe.moe.experts import Experts
from dgmoe.moe.fixed_shape import fixed_shape_dispatch

#: aten operations that copy a device value to the host, or whose output shape depends on device values
HOST_ATEN = {"_local_scalar_dense", "nonzero", "bincount", "masked_select", "unique", "_unique", "_unique2",
             "unique_consecutive", "unique_dim", "repeat_interleave", "item", "argwhere"}


class HostAten(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        # repeat_interleave with an integer count is fixed-shape; with a tensor of counts it reads them
        if name in HOST_ATEN and not (name == "repeat_interleave" and not isinstance(args[1], torch.Tensor)):
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def _host_reads(dispatch, keep=False):
    torch.manual_seed(0)
    experts = Experts(4, 16, 16)
    x = torch.randn(20, 16, requires_grad=True)
    idx = torch.stack([torch.randperm(4)[:2] for _ in range(20)])
    gates = torch.rand(20, 2, requires_grad=True)
    mask = capacity_keep_mask(idx, gates, 4, 8) if keep else None
    with HostReads() as python_level, HostAten() as aten_level:
        dispatch(x, idx, gates, experts, mask).sum().backward()
    return python_level.calls + [(name, "aten") for name in aten_level.calls]


def _triton_dispatch(*args):
    pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]')")
    from dgmoe.moe.kernels import expert_dispatch
    return expert_dispatch(*args)


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("dispatch", [fixed_shape_dispatch, _triton_dispatch], ids=["fixed_shape", "triton"])
def test_fp32_cuda_paths_read_nothing_back(dispatch, keep):
    assert _host_reads(dispatch, keep) == []


def test_the_check_catches_the_sorted_dispatch_reading_its_counts():
    names = {name for name, _ in _host_reads(sorted_dispatch)}
    assert {"bincount", "tolist"} <= names


def test_the_fused_router_reads_nothing_back():
    pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]')")
    from dgmoe.moe.kernels import fused_route
    logits = torch.randn(20, 6, requires_grad=True)
    with HostReads() as python_level, HostAten() as aten_level:
        r = fused_route(logits, 2, torch.randn(20, 6), 1 / 6)
        (r.gates.sum() + r.balance_loss()).backward()
    assert python_level.calls == [] and aten_level.calls == []


def test_the_check_sees_reads_made_in_a_backward():
    class ReadsInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, grad):
            grad.sum().item()
            return grad

    assert ("_local_scalar_dense", "aten") in _host_reads(lambda x, *_: ReadsInBackward.apply(x))
