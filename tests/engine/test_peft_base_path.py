"""A PEFT run's checkpoint names its base weights by their absolute path, resolved when the run starts (a
relative --pretrained is no trap for a tool run from another folder), and a base file that moved is found by
its sha256 beside the run or the recorded path, under any name."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dgmoe.engine.checkpoint import load_run
from dgmoe.errors import UsageError
from dgmoe.models import create_model


def test_the_base_is_recorded_absolute_and_found_by_hash_when_moved(tmp_path, monkeypatch):
    from dgmoe.engine import train

    work = tmp_path / "work"
    work.mkdir()
    torch.manual_seed(0)
    dense = create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(work / "base.safetensors"))
    monkeypatch.chdir(work)
    train(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=10, steps=1,
          checkpoint_freq=1, num_threads=1, progress="none", pretrained="base.safetensors", peft="lora",
          output_dir=str(tmp_path / "runs" / "lora"))
    run = tmp_path / "runs" / "lora"
    with safe_open(str(run / "model.safetensors"), "pt") as f:
        recorded = f.metadata()["base_pretrained"]
    assert recorded == str((work / "base.safetensors").resolve())
    monkeypatch.chdir(tmp_path)  # another folder: the recorded path still holds
    load_run(run)
    (work / "base.safetensors").rename(tmp_path / "runs" / "tower.safetensors")  # moved and renamed
    assert load_run(run)[0] is not None
    assert json.loads((run / "config.json").read_text())["model_build"]["kwargs"]["pretrained"] == recorded
    (tmp_path / "runs" / "tower.safetensors").write_bytes(b"other bytes")  # the same name, not the same weights
    with pytest.raises(UsageError, match="which is not a file and is not beside it"):
        load_run(run)
