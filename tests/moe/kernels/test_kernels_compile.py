"""Every Triton kernel variant, and every tile config the experts' autotuning may pick, compiles for an H100/H200
(SM90) down to a cubin on a machine without a GPU (`compile_sm90.py`, in a process of its own: the rest of this
folder's tests run the interpreter)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]')")


@pytest.mark.slow
def test_every_kernel_compiles_for_sm90():
    pytest.importorskip("triton.backends.nvidia.compiler", reason="this triton has no NVIDIA backend")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    script = Path(__file__).with_name("compile_sm90.py")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "compiled for sm_90" in done.stdout


@pytest.mark.slow
def test_every_autotune_config_compiles_for_sm90():
    """ScatterMoE's 128x128x32 tile with 4 stages among them: it compiles and its shared memory fits a block."""
    pytest.importorskip("triton.backends.nvidia.compiler", reason="this triton has no NVIDIA backend")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    script = Path(__file__).with_name("compile_sm90.py")
    done = subprocess.run([sys.executable, str(script), "autotune"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "compiled every autotune config for sm_90" in done.stdout
