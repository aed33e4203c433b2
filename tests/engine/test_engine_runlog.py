"""What a run tells its user and keeps: the first lines, progress lines outside a terminal, train.log,
provenance in config.json and in the weights, and `train()`'s accuracies."""
import json

import pytest
from safetensors import safe_open

from dgmoe.engine import train
from dgmoe.engine.runlog import RunLog
from dgmoe.engine.sinks import ConsoleSink

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=20,
            steps=4, checkpoint_freq=2, num_threads=1, progress="lines")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runlog") / "run"
    lines: list[str] = []
    import dgmoe.engine.runlog as runlog

    original = runlog.RunLog._print
    runlog.RunLog._print = lambda self, line: lines.append(line)
    try:
        result = train(test_envs=(1,), output_dir=str(out), **TINY)
    finally:
        runlog.RunLog._print = original
    return out, result, lines


def test_first_line_names_the_held_out_domain_and_the_run(run):
    out, _, lines = run
    assert lines[0] == (f"ERM with vit_micro_patch7_28 on RotatedMNIST (cpu, fp32): test domain 15 held out, "
                        f"training on 0, 30, 45, 60, 75 -> {out}")
    assert lines[1].startswith("RotatedMNIST: 6 domains, 10 classes, 28 px from ")
    assert "4 steps, a checkpoint every 2" in lines[1]
    assert lines[-1].startswith(f"finished {out}: test accuracy ")


def test_device_auto_is_recorded_as_the_device_used(run):
    """The default --device auto resolves before anything is written: config.json never says "auto" (on this
    CPU-only machine, cpu; the first line says the same)."""
    out, _, lines = run
    import torch

    used = "cuda" if torch.cuda.is_available() else "cpu"
    assert json.loads((out / "config.json").read_text())["config"]["execution"]["device"] == used
    assert f"({used}" in lines[0]


def test_train_log_keeps_what_the_console_said(run):
    out, _, lines = run
    log = (out / "train.log").read_text()
    assert log.startswith("=== ") and "dgmoe 0." in log.splitlines()[0]
    for line in lines:
        assert line in log


def test_provenance_in_config_and_weights(run):
    import torch

    import dgmoe

    out, _, _ = run
    made_by = json.loads((out / "config.json").read_text())["provenance"]
    assert made_by["dgmoe"] == dgmoe.__version__ and made_by["torch"] == torch.__version__
    for key in ("python", "numpy", "cuda", "git_commit", "host", "platform", "created"):
        assert key in made_by, key
    for name in ("model.safetensors", "best.safetensors"):
        with safe_open(str(out / name), "pt") as f:
            meta = f.metadata()
        assert meta["dgmoe"] == dgmoe.__version__ and meta["torch"] == torch.__version__


def test_train_returns_final_and_selected_accuracies(run):
    _, result, _ = run
    last = result.records[-1]
    assert result.final == {"step": 3, "test_acc": last["env1_in_acc"], "test_accs": {"15": last["env1_in_acc"]}}
    val = [(r["step"], sum(r[f"env{i}_out_acc"] for i in (0, 2, 3, 4, 5)) / 5) for r in result.records]
    best_step, best_val = max(val, key=lambda sv: (sv[1], -sv[0]))
    assert result.selected["step"] == best_step and result.selected["val_acc"] == pytest.approx(best_val)
    chosen = next(r for r in result.records if r["step"] == best_step)
    assert result.selected["test_acc"] == chosen["env1_in_acc"]


def _lines_console(monkeypatch, checkpoint_steps):
    """A console sink in lines mode on a fake clock (so no verdict depends on the machine's speed): (the
    clock to advance, the lines said, the sink); 100 steps of 32 images, a line every 30 s."""
    clock = [0.0]
    monkeypatch.setattr("dgmoe.engine.progress.time.monotonic", lambda: clock[0])
    said: list[str] = []
    log = RunLog(console=True)
    log._print = said.append
    log.write_console = said.append
    sink = ConsoleSink(log, "lines", start=0, total=100, checkpoint_steps=checkpoint_steps, images_per_step=32,
                       test_envs=[0], every_s=30.0)
    return clock, said, sink


def test_lines_mode_prints_progress_every_interval(monkeypatch):
    """Outside a terminal: a line after the first step, then one whenever `every_s` of wall time passed
    (a fake clock, so the verdict never depends on the machine's speed), and one per checkpoint."""
    clock, said, sink = _lines_console(monkeypatch, checkpoint_steps=[0, 50, 99])
    for step in range(10):
        clock[0] += 10.0  # each step takes 10 s, of which 2 s train
        sink.step(step, {"loss": 1.0}, train_seconds=2.0)
    progress = [s for s in said if s.startswith("step ")]
    assert [s.split()[1] for s in progress] == ["1/100", "4/100", "7/100", "10/100"]
    assert "16.0 img/s training" in progress[0]  # 32 images / 2 s of training, evaluation excluded
    assert progress[-1].endswith("eta 0:03:00")  # 90 steps x 2 s
    record = {"step": 50, "loss": 0.5, "eval_time": 1.0, "args": {"domains": ["a", "b"]},
              "env0_in_acc": 0.25, "env1_out_acc": 0.75}
    sink.checkpoint(record)
    assert said[-1].startswith("checkpoint step 50  loss 0.5000  val (training domains, out) 0.7500  test a 0.2500")


def test_lines_show_the_pace_since_the_previous_line_not_the_first_steps_warm_up(monkeypatch):
    clock, said, sink = _lines_console(monkeypatch, checkpoint_steps=[99])
    for step in range(7):
        clock[0] += 10.0
        sink.step(step, {"loss": 1.0}, train_seconds=8.0 if step == 0 else 2.0)  # a slow first step (warm-up)
    progress = [s for s in said if s.startswith("step ")]
    assert "4.0 img/s training  8.000 s/step" in progress[0]
    assert "16.0 img/s training  2.000 s/step" in progress[1] and "16.0 img/s training" in progress[2]


def test_a_sink_passed_to_train_sees_every_step_and_checkpoint(tmp_path):
    from dgmoe.engine.sinks import Sink

    class Collect(Sink):
        def __init__(self):
            self.steps, self.checkpoints, self.closed = [], [], False

        def step(self, step, metrics, train_seconds):
            self.steps.append(step)

        def checkpoint(self, record):
            self.checkpoints.append(record["step"])

        def close(self):
            self.closed = True

    sink = Collect()
    result = train(test_envs=(0,), output_dir=str(tmp_path / "run"), sinks=[sink], **{**TINY, "progress": "none"})
    assert sink.steps == [0, 1, 2, 3] and sink.checkpoints == [r["step"] for r in result.records] == [0, 2, 3]
    assert sink.closed
