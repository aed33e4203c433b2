"""`dgmoe.moe.kernels` imports without triton, and says so clearly when a kernel is asked for without it."""
import subprocess
import sys

import pytest
import torch

import dgmoe.moe.kernels as kernels
from dgmoe.moe.experts import Experts


def test_importing_the_package_does_not_import_triton():
    code = "import sys, dgmoe.moe.kernels, dgmoe.moe.fixed_shape; assert 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_triton_a_kernel_call_names_the_extra(monkeypatch):
    monkeypatch.setattr(kernels, "available", lambda: False)
    experts = Experts(2, 4, 4)
    with pytest.raises(RuntimeError, match=r"dgmoe\[triton\]"):
        kernels.expert_dispatch(torch.randn(3, 4), torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1), experts)
    with pytest.raises(RuntimeError, match=r"dgmoe\[triton\]"):
        kernels.fused_route(torch.randn(3, 2), 1)
