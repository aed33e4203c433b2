"""The GPU script's measurements (benchmarks/gpu.sh) at tiny sizes on the CPU: host syncs per step (`dgmoe bench
syncs`), top-1 GMoE through `bench models --model-kwargs`, compile modes and TF32 plumbing; and, on a GPU, whole
models' fp32/TF32 training steps held to zero host syncs."""
import pytest
import torch
from click.testing import CliRunner
from cuda_syncs import step_makes_no_sync

from dgmoe.bench import models as bench_models_module
from dgmoe.bench.config import ModelBenchConfig, SyncBenchConfig
from dgmoe.bench.models import _build, _steps
from dgmoe.bench.syncs import bench_syncs
from dgmoe.cli import main
from dgmoe.errors import UsageError
from dgmoe.moe import MoEMlp

TINY = dict(img_size=28, batch_size=2)


def test_bench_syncs_runs_the_steps_and_says_there_is_nothing_to_count_on_the_cpu():
    rows = bench_syncs(SyncBenchConfig(("gmoe_micro_patch7_28",), ("fp32", "bf16"), device="cpu", steps=1, **TINY))
    assert [(r["model"], r["precision"]) for r in rows] == [("gmoe_micro_patch7_28", "fp32"),
                                                             ("gmoe_micro_patch7_28", "bf16")]
    assert {r["host syncs per step"] for r in rows} == {"n/a (cpu)"}


def test_bench_syncs_command_refuses_tf32_off_cuda_in_one_line():
    result = CliRunner().invoke(main, ["bench", "syncs", "--device", "cpu", "--precisions", "fp32,tf32"])
    assert isinstance(result.exception, UsageError)  # (`dgmoe` prints it as one line, exit 2)
    assert "--precision tf32 rounds CUDA matmuls to TF32; --device cpu" in str(result.exception)


def test_bench_configs_resolve_auto_and_refuse_graphs_off_cuda():
    cfg = ModelBenchConfig(("vit_micro_patch7_28",), **TINY)
    assert cfg.device == ("cuda" if torch.cuda.is_available() else "cpu")  # never "auto" once built
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="--compile-mode reduce-overhead captures CUDA graphs"):
            ModelBenchConfig(("vit_micro_patch7_28",), compile=True, compile_mode="reduce-overhead", **TINY)
        with pytest.raises(UsageError, match="--precision tf32"):
            ModelBenchConfig(("vit_micro_patch7_28",), precision="tf32", **TINY)


def test_model_kwargs_build_the_top_1_gmoe_of_the_inference_row():
    """GMoE's top-1 inference configuration (GMoE, Table 16's 1.07x row) is `--model-kwargs` on the GMoE only."""
    cfg = ModelBenchConfig(("vit_micro_patch7_28", "gmoe_micro_patch7_28"), device="cpu",
                           model_kwargs={"gmoe_micro_patch7_28": {"top_k": 1}}, **TINY)
    gmoe = _build("gmoe_micro_patch7_28", cfg)
    layers = [m for m in gmoe.modules() if isinstance(m, MoEMlp)]
    assert layers and all(m.config.top_k == 1 for m in layers)
    default = _build("gmoe_micro_patch7_28", ModelBenchConfig(("gmoe_micro_patch7_28",), device="cpu", **TINY))
    assert all(m.config.top_k == 2 for m in default.modules() if isinstance(m, MoEMlp))
    _build("vit_micro_patch7_28", cfg)  # (the ViT gets none of them)


def test_the_compile_mode_reaches_torch_compile(monkeypatch):
    seen = []
    monkeypatch.setattr(bench_models_module, "compile_blocks", lambda model, **kw: seen.append(kw) or model)
    _build("vit_micro_patch7_28", ModelBenchConfig(("vit_micro_patch7_28",), device="cpu", compile=True, **TINY))
    assert seen == [{"mode": "default"}]


def test_flops_of_a_cuda_only_config_are_counted_on_the_cpu():
    """`training_flops` counts on the CPU: a config of the GPU's settings (tf32, CUDA graphs), which the CPU
    refuses, is counted in fp32 eager there."""
    from dgmoe.bench.models import training_flops

    cfg = ModelBenchConfig(("vit_micro_patch7_28",), device="cpu", **TINY)
    gpu_like = ModelBenchConfig(("vit_micro_patch7_28",), device="cpu", **TINY)
    for name, value in (("device", "cuda"), ("precision", "tf32"), ("compile", True),
                        ("compile_mode", "reduce-overhead")):
        object.__setattr__(gpu_like, name, value)  # (what a config built on a GPU machine holds)
    assert training_flops("vit_micro_patch7_28", gpu_like) == training_flops("vit_micro_patch7_28", cfg)


@pytest.mark.slow
def test_a_compiled_default_mode_step_trains_on_the_cpu():
    """The compiled step (mode default, inductor; needs a C compiler) takes the same steps as the eager one."""
    cfg = ModelBenchConfig(("gmoe_micro_patch7_28",), device="cpu", compile=True, **TINY)
    train_step, infer = _steps(_build("gmoe_micro_patch7_28", cfg), cfg)
    train_step()
    infer()


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("name", ["gmoe_small_patch16_224", "sfmoe_small_patch16_224", "moge_small_patch16_224"])
def test_fp32_and_tf32_train_steps_make_no_host_sync(name, precision):
    """The GPU user's default arithmetic: a whole model's training step (after a first) under
    `set_sync_debug_mode("error")`, which raises at any host synchronisation."""
    step_makes_no_sync(name, precision)
