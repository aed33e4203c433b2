"""The Hugging Face Hub path of `dgmoe data download` and `dgmoe weights get`, against a loopback server standing
in for the Hub through HF_ENDPOINT (no test leaves 127.0.0.1)."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch
from loopback import Loopback, tar_bytes
from safetensors.torch import load_file, save

from dgmoe.data import install as install_mod
from dgmoe.data.content import SOURCE_RECORD
from dgmoe.data.sources import Download, Part, Source

pytest.importorskip("huggingface_hub")


@pytest.fixture
def hub(monkeypatch):
    with Loopback(lifetime=60) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.base)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        yield s


def test_a_hub_dataset_source_is_fetched_at_its_revision_and_unpacked(cli, hub, tmp_path, monkeypatch):
    parts = {name: tar_bytes({f"{name}/d/c/1.jpg": name.encode()}) for name in ("PACS", "VLCS")}
    for name, body in parts.items():
        hub.serve_hub("someone/oop", f"hard/{name}.tar.gz", "main", body)
    monkeypatch.setattr(install_mod, "downloads", lambda: {"OOP": Download("OOP", "DomainBed_OOP/hard", (), (
        Source("the authors' Hub dataset", "hub", tuple(Part("someone/oop", f"hard/{n}.tar.gz") for n in parts),
               "l", revision="main"),))})
    result = cli("data", "download", "OOP", "--data-dir", tmp_path)
    assert result.exit_code == 0, result.output
    root = tmp_path / "DomainBed_OOP" / "hard"
    assert (root / "PACS" / "d" / "c" / "1.jpg").read_bytes() == b"PACS"
    assert (root / "VLCS" / "d" / "c" / "1.jpg").read_bytes() == b"VLCS"
    record = json.loads((root / SOURCE_RECORD).read_text())
    assert record["revision"] == "main" and record["archives"] == {
        f"hard/{n}.tar.gz": hashlib.sha256(b).hexdigest() for n, b in parts.items()}
    assert any("resolve/main/hard/PACS.tar.gz" in entry[1] for entry in hub.log)


def test_weights_get_writes_safetensors_and_its_record_and_prints_the_argument(cli, hub, tmp_path):
    state = {"cls_token": torch.zeros(1, 1, 4), "pos_embed": torch.arange(8.0).reshape(1, 2, 4)}
    body = save(state)
    hub.serve_hub("timm/deit_small_patch16_224.fb_in1k", "model.safetensors", "main", body, repo_type="model")
    result = cli("weights", "get", "deit_small_patch16_224", "--to", tmp_path / "w")
    assert result.exit_code == 0, result.output
    path = tmp_path / "w" / "deit_small_patch16_224.safetensors"
    assert f"--pretrained {path}" in result.output and "not pinned" in result.output
    assert torch.equal(load_file(str(path))["pos_embed"], state["pos_embed"])
    record = json.loads((tmp_path / "w" / "deit_small_patch16_224.json").read_text())
    assert record["sha256"] == hashlib.sha256(body).hexdigest()
    assert record["source"] == "hf-hub:timm/deit_small_patch16_224.fb_in1k" and record["revision"] == "main"
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["deit_small_patch16_224.json",
                                                                 "deit_small_patch16_224.safetensors"]


def test_weights_get_refuses_what_is_not_safetensors_and_unknown_names(cli, hub, tmp_path):
    hub.serve_hub("timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors", "main", b"<html>quota</html>" * 10,
                  repo_type="model")
    bad = cli("weights", "get", "deit_tiny_patch16_224", "--to", tmp_path)
    assert bad.exit_code == 1 and "not a safetensors file" in bad.output
    assert not (tmp_path / "deit_tiny_patch16_224.safetensors").exists()
    typo = cli("weights", "get", "deit_smal_patch16_224", "--to", tmp_path)
    assert typo.exit_code == 2 and "did you mean deit_small_patch16_224?" in typo.output
    listed = cli("weights", "get", "--list")
    assert listed.exit_code == 0 and "timm/vit_small_patch14_dinov2.lvd142m" in listed.output
