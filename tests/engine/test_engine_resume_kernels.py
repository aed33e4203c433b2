"""Kill/resume under `--compile` and `--fused-optimizer`: exact, or refused in one line.

A run killed after its second checkpoint's resume state (an exception nothing handles, raised before the next
write, as SIGKILL would stop it) and run again with the same command ends with the records and weights of the
uninterrupted run: under `--compile` (dynamo's aot_eager backend on the CPU, as test_engine_gpu_paths.py) and on
the fused optimiser kernel. Both round differently from torch's eager default: a killed default run continued
with `--fused-optimizer` (a setting of the run's identity), or the reverse, and a killed run continued with the
other `--compile` setting (which its resume state records) are refused in one line, the folder left as it was.
"""
from __future__ import annotations

import hashlib
from functools import partial

import pytest
import torch
from run_records import comparable_records
from safetensors.torch import load_file

from dgmoe.cli import run
from dgmoe.engine import setup as run_setup
from dgmoe.engine.rundir import RunWriter
from dgmoe.engine.trainer import train
from dgmoe.models.compiled import compile_blocks

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            checkpoint_freq=2, steps=6, num_threads=1, progress="none", seed=2)
ARGV = ["train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28", "--model-kwargs", '{"depth": 1}',
        "--n-per-domain", "20", "--checkpoint-freq", "2", "--steps", "6", "--num-threads", "1", "--progress", "none",
        "--seed", "2"]


class Killed(BaseException):
    """Stands for SIGKILL: nothing in the engine handles it."""


def _killed(out, monkeypatch, **kw):
    """Train until the second checkpoint's resume state is written, then stop before the next write."""
    original, resumes = RunWriter._write, []

    def killing(self, write):
        if len(resumes) == 2:
            raise Killed
        original(self, write)
        if (self.out / "resume.pt").exists() and (self.out / "resume.pt").stat().st_mtime_ns not in resumes:
            resumes.append((self.out / "resume.pt").stat().st_mtime_ns)

    with monkeypatch.context() as patch:
        patch.setattr(RunWriter, "_write", killing)
        with pytest.raises(Killed):
            train(output_dir=str(out), **TINY, **kw)
    assert (out / "resume.pt").exists() and not (out / "done").exists()


def _same(a, b):
    assert comparable_records(a) == comparable_records(b)
    for name in ("model.safetensors", "best.safetensors"):
        x, y = load_file(str(a / name)), load_file(str(b / name))
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), name


def _files(folder):
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and p.name != ".dgmoe.lock"}  # (the lock a refused command took)


@pytest.mark.parametrize("fused", [False, True], ids=["default", "fused"])
def test_a_killed_run_resumes_exactly_and_the_other_kernel_is_refused(tmp_path, monkeypatch, capsys, fused):
    reference, out = tmp_path / "reference", tmp_path / "killed"
    train(output_dir=str(reference), fused_optimizer=fused, **TINY)
    _killed(out, monkeypatch, fused_optimizer=fused)
    before = _files(out)
    capsys.readouterr()
    other = [] if fused else ["--fused-optimizer"]  # the reverse of the killed run's setting
    assert run([*ARGV, "--output-dir", str(out), *other]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "differs in: fused_optimizer" in err and "Traceback" not in err, err
    assert _files(out) == before  # nothing written before the refusal
    assert run([*ARGV, "--output-dir", str(out), *([] if other else ["--fused-optimizer"])]) == 0
    _same(out, reference)


def _refused(capsys, argv, out, expected):
    before = _files(out)
    capsys.readouterr()
    assert run([*argv, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and "Traceback" not in err, err
    assert _files(out) == before


def test_a_killed_compiled_run_resumes_exactly_and_only_compiled(tmp_path, monkeypatch, capsys):
    """Compiled graphs round differently from eager kernels (an eager run resumed compiled does not end as
    either uninterrupted run), so a resume state says whether it was compiled and the other setting is refused."""
    monkeypatch.setattr(run_setup, "compile_blocks", partial(compile_blocks, backend="aot_eager"))
    torch._dynamo.reset()
    reference, out, eager = tmp_path / "reference", tmp_path / "killed", tmp_path / "eager"
    train(output_dir=str(reference), compile=True, **TINY)
    _killed(out, monkeypatch, compile=True)
    _refused(capsys, ARGV, out, "was trained with --compile")
    _killed(eager, monkeypatch)
    _refused(capsys, [*ARGV, "--compile"], eager, "was trained without --compile")
    resumed = train(output_dir=str(out), compile=True, **TINY)
    assert resumed.records[-1]["args"]["compile"] is True
    _same(out, reference)


def test_a_peft_resume_from_a_replaced_base_file_names_the_digest_and_path_it_needs(tmp_path, capsys):
    """A PEFT run's resume state leaves its frozen base out: resumed from a replaced base file it is refused in one
    line giving the path and the SHA-256 it needs (and the file's), with the folder unchanged."""
    from safetensors.torch import save_file

    from dgmoe.models import create_model
    from dgmoe.models.peft import file_sha256

    base = tmp_path / "base.safetensors"
    torch.manual_seed(0)
    dense = create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(base))
    out = tmp_path / "run"
    argv = [*ARGV, "--pretrained", str(base), "--peft", "lora", "--keep-resume", "--output-dir", str(out)]
    assert run([*argv[:argv.index("--steps") + 1], "4", *argv[argv.index("--steps") + 2:]]) == 0
    needed = file_sha256(base)
    save_file({k: v.contiguous() * 2 for k, v in dense.state_dict().items()}, str(base))
    before = _files(out)
    capsys.readouterr()
    assert run([*argv, "--extend"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"sha256 {needed}" in err and str(base) in err and f"sha256 {file_sha256(base)}" in err, err
    assert _files(out) == before
