"""What the GPU path of the step loop changes, checked on the CPU (the step metrics in
test_engine_step_metrics.py): evaluation loaders that keep their workers, and `--compile` (block by block) that
trains the same run and saves the same checkpoint names."""
import math
from functools import partial

import pytest
import torch

from dgmoe.data.catalogue import get_dataset
from dgmoe.data.loaders import EvalBatches, eval_loader
from dgmoe.engine import setup as run_setup
from dgmoe.engine import train
from dgmoe.models.compiled import compile_blocks


def test_evaluation_batches_keep_their_workers_and_equal_the_plain_loader():
    dataset = get_dataset("RotatedMNIST", None, None, n_per_domain=40)
    parts = [(dataset[0], torch.arange(0, 25)), (dataset[1], torch.arange(3, 40))]
    plain = [b for env, idx in parts for b in eval_loader(env, idx, None, 16, 0)]
    persistent = EvalBatches(None, 16, num_workers=1)
    for _ in range(2):  # the second evaluation reuses the first one's loader and its worker
        got = list(persistent(parts))
        assert [p for p, _ in got] == [0, 0, 1, 1, 1]
        for (_, b), ref in zip(got, plain):
            assert torch.equal(b.x, ref.x) and torch.equal(b.y, ref.y)
    assert len(persistent._loaders) == 1
    (loader,) = persistent._loaders.values()
    assert loader.persistent_workers and loader._iterator is not None  # the workers stay alive


def _run(tmp_path, name, **kw):
    return train(dataset="RotatedMNIST", model="gmoe_micro_patch7_28", model_kwargs={"depth": 4}, steps=4,
                 checkpoint_freq=2, n_per_domain=40, num_threads=1, progress="none", precision="bf16",
                 output_dir=str(tmp_path / name), **kw)


def test_compile_trains_the_same_run_and_saves_the_same_weights_names(tmp_path, monkeypatch):
    """`--compile` (here with dynamo's aot_eager backend: the graphs are traced and run by autograd without
    generating code, which takes minutes on this CPU) gives the eager run's records within bf16 noise."""
    from safetensors.torch import load_file

    monkeypatch.setattr(run_setup, "compile_blocks", partial(compile_blocks, backend="aot_eager"))
    torch._dynamo.reset()
    compiled, eager = _run(tmp_path, "compiled", compile=True), _run(tmp_path, "eager")
    for a, b in zip(compiled.records, eager.records):
        assert math.isfinite(a["loss"])
        assert a["loss"] == pytest.approx(b["loss"], rel=0.05, abs=0.02)
    assert compiled.records[-1]["args"]["compile"] is True
    names = [set(load_file(str(r.output_dir / "model.safetensors"))) for r in (compiled, eager)]
    assert names[0] == names[1] and not any("_orig_mod" in n for n in names[0])
