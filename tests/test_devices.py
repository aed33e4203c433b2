"""`--device auto`, `--precision tf32` and `--compile-mode` (dgmoe.devices): what they resolve to, what they refuse,
and the TF32 switches set once and restored."""
import dataclasses

import pytest
import torch

from dgmoe.devices import (
    AUTO,
    check_compile_mode,
    check_precision,
    describe,
    fp32_arithmetic,
    resolve_device,
)
from dgmoe.engine.config import ExecutionConfig, RunConfig
from dgmoe.errors import UsageError


def test_auto_is_the_default_and_resolves_to_the_device_torch_sees():
    assert ExecutionConfig().device == AUTO
    assert resolve_device(AUTO) == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cuda:1") == "cuda:1" and resolve_device("cpu") == "cpu"  # names pass unchanged


def test_every_device_setting_defaults_to_auto():
    """One declaration (`device_setting`): every command's --device has the same default."""
    from dgmoe.bench.algorithms import BenchmarkConfig
    from dgmoe.bench.config import AlgorithmBenchConfig, LayerBenchConfig, MemoryBenchConfig, ModelBenchConfig
    from dgmoe.posthoc.config import LeaderboardConfig, SoupConfig

    for kind in (LayerBenchConfig, ModelBenchConfig, MemoryBenchConfig, AlgorithmBenchConfig, LeaderboardConfig,
                 SoupConfig):
        field = {f.name: f for f in dataclasses.fields(kind)}["device"]
        assert field.default == AUTO, kind
    assert {f.name: f for f in dataclasses.fields(BenchmarkConfig)}["device"].default == AUTO


def test_old_run_configs_keep_their_device():
    """A run folder written before auto (device "cpu") loads with its device; the device stays outside the run's
    identity, so a run resumed on another device is the same run."""
    old = RunConfig.from_dict({"execution": {"device": "cpu"}})
    assert old.execution.device == "cpu"
    assert old.identity() == RunConfig().identity() and old.identity_hash() == RunConfig().identity_hash()


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_tf32_is_refused_off_cuda(device):
    with pytest.raises(UsageError, match=f"--precision tf32 rounds CUDA matmuls to TF32; --device {device} is not"):
        check_precision("tf32", device)
    check_precision("fp32", device)
    check_precision("bf16", device)
    check_precision("tf32", "cuda:0")


def test_tf32_is_part_of_the_run_identity():
    assert RunConfig().replace(precision="tf32").identity_hash() != RunConfig().identity_hash()


def test_compile_mode_needs_compile_and_cuda():
    check_compile_mode("default", False, "cpu")
    with pytest.raises(UsageError, match="read by --compile only"):
        check_compile_mode("reduce-overhead", False, "cuda")
    with pytest.raises(UsageError, match="captures CUDA graphs; --device cpu"):
        check_compile_mode("reduce-overhead", True, "cpu")
    check_compile_mode("reduce-overhead", True, "cuda:0")


@pytest.mark.parametrize("precision, mode", [("tf32", "tf32"), ("fp32", "ieee"), ("bf16", "ieee")])
def test_fp32_arithmetic_sets_the_tf32_switches_once_and_restores_them(precision, mode):
    """The switches are plain flags (settable on a CPU-only torch): inside, TF32 for tf32 and IEEE fp32 for the
    others (cuDNN's own default, TF32, switched off); after, what was there before."""
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    before = (matmul.fp32_precision, conv.fp32_precision)
    with fp32_arithmetic(precision, "cuda"):
        assert (matmul.fp32_precision, conv.fp32_precision) == (mode, mode)
    assert (matmul.fp32_precision, conv.fp32_precision) == before
    with fp32_arithmetic("tf32", "cpu"):  # off CUDA: nothing touched
        assert (matmul.fp32_precision, conv.fp32_precision) == before


def test_describe_names_the_device_used_and_the_precision():
    assert describe("cpu", "fp32") == "cpu, fp32"
    if not torch.cuda.is_available():
        assert describe(AUTO, "bf16") == "cpu, bf16"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's refusal")
def test_train_refuses_tf32_on_a_cpu_machine_before_writing(tmp_path):
    """`train()` (the API, past the command line's precheck) with the default --device auto on a machine
    without CUDA: the refusal comes from preparing the run, before the folder exists."""
    from dgmoe.engine import train

    out = tmp_path / "run"
    with pytest.raises(UsageError, match="--precision tf32 rounds CUDA matmuls to TF32; --device cpu"):
        train(dataset="RotatedMNIST", model="vit_micro_patch7_28", n_per_domain=8, steps=1,
              precision="tf32", output_dir=str(out))
    assert not out.exists()


def test_graphed_steps_are_marked_and_others_are_not(monkeypatch):
    """With CUDA graphs each update starts with `cudagraph_mark_step_begin` (the trainer and `bench data` call
    `RunSetup.step_begins`); compiled in the default mode, or eager, nothing is called."""
    from types import SimpleNamespace

    from dgmoe.engine.setup import RunSetup

    marks: list[int] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    for settings, expected in (({"compile": True, "compile_mode": "reduce-overhead"}, 1), ({"compile": True}, 0),
                               ({}, 0)):
        marks.clear()
        RunSetup.step_begins(SimpleNamespace(cfg=RunConfig().replace(**settings)))  # type: ignore[arg-type]
        assert len(marks) == expected, settings


def test_the_run_compiles_its_blocks_in_its_compile_mode(monkeypatch):
    """`placed_algorithm` hands `--compile-mode` to torch.compile (default here: reduce-overhead needs CUDA)."""
    import dgmoe.engine.setup as setup_module
    from dgmoe.engine.setup import prepare_run

    seen = []
    monkeypatch.setattr(setup_module, "compile_blocks", lambda network, **kw: seen.append(kw) or network)
    cfg = RunConfig().replace(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1},
                              n_per_domain=8, compile=True, output_dir="unused")
    setup = prepare_run(cfg)
    assert setup.cfg.execution.device == resolve_device(AUTO)  # resolved when the run is prepared
    setup.placed_algorithm()
    assert seen == [{"mode": "default"}]
