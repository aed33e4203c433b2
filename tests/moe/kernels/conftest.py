"""The Triton kernels run on CPU tensors under Triton's interpreter. triton reads TRITON_INTERPRET when a
kernel is decorated, i.e. when `dgmoe.moe.kernels.gemm` / `router_kernels` are first imported: this conftest
is loaded at collection, before any test imports them. On a GPU machine, `TRITON_INTERPRET=0 python -m pytest
-m gpu tests/moe/kernels` compiles the kernels instead and runs the CUDA checks (test_kernels_gpu.py); the
interpreter's CPU checks skip then."""
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _interpreter_for_cpu_tests(request):
    if os.environ["TRITON_INTERPRET"] != "1" and request.node.get_closest_marker("gpu") is None:
        pytest.skip("TRITON_INTERPRET is not 1: the CPU checks of the Triton kernels need the interpreter")
