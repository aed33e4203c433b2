import os
from pathlib import Path

import pytest
import torch

# The suite runs on the CPU: Triton kernels (dgmoe.moe.kernels) run under Triton's interpreter, which triton reads
# when a kernel is decorated, i.e. when its module is first imported, possibly while another test file is collected.
# A GPU run sets TRITON_INTERPRET=0 itself (tests/moe/kernels/conftest.py).
os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED_DATA}")
    return SHARED_DATA


class CliResult:
    def __init__(self, exit_code: int, output: str):
        self.exit_code, self.output = exit_code, output


@pytest.fixture
def cli(capsys):
    """Run the `dgmoe` command line in-process, as the executable does (one-line errors, exit codes);
    returns the exit code and stdout + stderr."""
    from dgmoe.cli import run

    def invoke(*args: str) -> CliResult:
        capsys.readouterr()
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out + captured.err)

    return invoke
