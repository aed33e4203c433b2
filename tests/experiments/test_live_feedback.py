"""Live feedback of the two long commands: `dgmoe synthetic` shows a bar or timed progress lines while it trains,
and `dgmoe quickstart` says which of its two models trains, in what order, before each run. Timed lines are
checked on a fake clock."""
from dataclasses import replace
from types import SimpleNamespace

import pytest
from md_tables import table_rows

from dgmoe.engine.progress import Progress
from dgmoe.experiments import quickstart as qs
from dgmoe.experiments import synthetic as syn

TINY = replace(syn.SyntheticConfig(), n_train=600, n_val=20, n_test=20, epochs=2, batch_size=256)


class FakeClock:
    """Each reading is `step` seconds after the previous one."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_training_advances_progress_by_every_optimiser_step():
    said = []
    progress = Progress(10_000, mode="lines", every_s=20.0, write=said.append, clock=FakeClock(8.0))
    syn.run_noiseless(TINY, seeds=(0,), progress=progress)
    assert syn.steps_per_network(TINY) == 2 * 3  # 2 epochs of ceil(600 / 256) batches
    assert progress.done == 2 * syn.steps_per_network(TINY)  # MLP and FCN
    assert said[0].startswith("MLP seed 0, epoch 1/2: 1/10000 steps")
    assert any(line.startswith("FCN seed 0, epoch 2/2") for line in said)  # lines keep coming (fake clock)


def test_noisy_runs_name_their_p1_p2():
    progress = Progress(100, mode="lines", write=lambda line: None)
    syn.run_noisy(TINY, grid=(0.8,), progress=progress)
    assert progress.desc == "MLP seed 0 p1=0.8 p2=0.8, epoch 2/2"


def test_cli_prints_progress_lines_when_not_on_a_terminal(cli, tmp_path, monkeypatch):
    clock = FakeClock(7.0)
    monkeypatch.setattr("dgmoe.engine.progress.time.monotonic", clock)
    result = cli("synthetic", "--out", tmp_path, "--seeds", "0", "--epochs", "2", "--n-train", "600", "--grid", "1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "synthetic: 3 networks x 6 steps (2 epochs of 600 samples)" in lines
    progress = [line for line in lines if " steps (" in line and "elapsed" in line]
    assert progress[0].startswith("MLP seed 0, epoch 1/2: 1/18 steps")
    assert len(progress) >= 3  # 18 steps, 7 fake seconds per clock reading: a line every few steps
    assert "MLP" in [row[0] for row in table_rows(result.output)]  # the report still follows


def test_cli_progress_none_is_quiet(cli, tmp_path):
    result = cli("synthetic", "--out", tmp_path, "--seeds", "0", "--epochs", "1", "--n-train", "300", "--grid", "none",
                 "--progress", "none")
    assert result.exit_code == 0 and "steps (" not in result.output
    assert "FCN" in [r[0] for r in table_rows(result.output)]


def test_quickstart_announces_each_model_before_it_trains(monkeypatch, tmp_path):
    events = []

    def fake_train(cfg):
        events.append(f"train {cfg.model.name}")
        assert cfg.training.eval_sample == 500 and cfg.training.checkpoint_freq == 50  # intermediate: a sample
        records = [{"step": 0, "args": {"domains": ["0", "15"]}, "env0_in_acc": 0.5, "env1_out_acc": 0.9}]
        return SimpleNamespace(records=records)

    monkeypatch.setattr(qs, "train", fake_train)
    rows = qs.quickstart(tmp_path, steps=1, say=events.append)
    assert events == [
        "[1/2] ViT (vit_micro_patch7_28): 6 blocks, width 96, dense",
        "train vit_micro_patch7_28",
        "[2/2] GMoE (gmoe_micro_patch7_28): 6 blocks, width 96, MoE in last-two blocks (2, 4 of 6), "
        "6 experts top-2 cosine",
        "train gmoe_micro_patch7_28",
    ]
    assert [r["model"] for r in rows] == list(qs.QUICKSTART_MODELS)


def test_the_announcement_leaves_data_and_held_out_domain_to_the_runs_first_line():
    line = qs.announcement(1, 2, "vit_micro_patch7_28")
    assert "RotatedMNIST" not in line and "held out" not in line


@pytest.mark.parametrize("bad", ["vit_micro", "nope"])
def test_an_unknown_quickstart_model_fails_before_any_training(monkeypatch, tmp_path, bad):
    monkeypatch.setattr(qs, "train", lambda cfg: pytest.fail("nothing may train"))
    with pytest.raises(KeyError, match="unknown model"):
        qs.quickstart(tmp_path, models=(bad,), say=lambda line: None)
