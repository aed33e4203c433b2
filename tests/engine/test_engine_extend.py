"""Extending a finished run to more steps, on purpose (`--extend`), and only then."""
import json

import pytest

from dgmoe.engine import train
from dgmoe.errors import UsageError

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=40,
            checkpoint_freq=2, num_threads=1, progress="none")


def _comparable(record):
    return {k: v for k, v in record.items() if k not in ("args", "step_time", "eval_time", "mem_gb")}


def test_extended_run_trains_on_exactly(tmp_path, cli):
    short = train(steps=6, keep_resume=True, output_dir=str(tmp_path / "run"), **TINY)
    assert [r["step"] for r in short.records] == [0, 2, 4, 5]
    with pytest.raises(UsageError, match="add --extend"):
        train(steps=10, output_dir=str(tmp_path / "run"), **TINY)
    longer = train(steps=10, extend=True, output_dir=str(tmp_path / "run"), **TINY)
    assert [r["step"] for r in longer.records] == [0, 2, 4, 5, 6, 8, 9]  # the old final checkpoint is kept
    scratch = train(steps=10, output_dir=str(tmp_path / "scratch"), **TINY)
    assert [r["step"] for r in scratch.records] == [0, 2, 4, 6, 8, 9]
    by_step = {r["step"]: r for r in longer.records}
    for record in scratch.records:  # training continued exactly: the same numbers as a 10-step run
        got, want = _comparable(by_step[record["step"]]), _comparable(record)
        if record["step"] == 6:  # its training-loss means cover steps 6 (extended) and 5-6 (from scratch)
            got, want = ({k: v for k, v in d.items() if not k.startswith("loss")} for d in (got, want))
        assert got == want, record["step"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["n_steps"] == 10 and config["extended_from"] == [{"n_steps": 6, "checkpoint_freq": 2}]
    assert train(steps=10, output_dir=str(tmp_path / "run"), **TINY).already_done
    tables = cli("results", tmp_path / "run", "--no-save")  # its records pass the completeness check
    assert tables.exit_code == 0, tables.output


def test_extend_refuses_what_it_cannot_do_exactly(tmp_path):
    train(steps=4, output_dir=str(tmp_path / "run"), **TINY)  # finished without --keep-resume
    with pytest.raises(UsageError, match="no resume.pt"):
        train(steps=8, extend=True, output_dir=str(tmp_path / "run"), **TINY)
    with pytest.raises(UsageError, match="larger than the 4 steps"):
        train(steps=3, extend=True, output_dir=str(tmp_path / "run"), **TINY)
    with pytest.raises(UsageError, match="differs in: seed"):
        train(steps=8, seed=1, extend=True, output_dir=str(tmp_path / "run"), **TINY)
