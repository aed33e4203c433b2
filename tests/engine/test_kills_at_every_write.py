"""`train`, `export peft`, `data prepare` and `soup --method wise-ft` killed at every one of their write points
(`kill_points`: every file and folder move, and inside every write of bytes, safetensors' own file writer
included, as SIGKILL would leave it): the re-run ends with exactly the files of an uninterrupted run, no
temporary file of the killed one left beside them. (`soup`'s other methods and `leaderboard` are killed the same
way in tests/posthoc/test_soup_kills.py and tests/report/test_report_wilds_leaderboard.py.)"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kill_points import folder_state, kill_everywhere
from run_records import comparable_records
from safetensors.torch import load_file, save_file

import dgmoe
from dgmoe.data import prepare_dataset
from dgmoe.data.cache import MANIFEST, cache_folder
from dgmoe.engine.export import PeftExportConfig, export_peft
from dgmoe.engine.trainer import train

TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=8,
            checkpoint_freq=2, num_threads=1, progress="none", test_envs=[0], seed=0)
WEIGHTS = ("model.safetensors", "best.safetensors")


def _tensors(path: Path) -> dict[str, list]:
    return {k: v.tolist() for k, v in load_file(str(path)).items()}


def _run_contents(out: Path) -> tuple:
    """What two runs of one command share: records without timings, config.json and weights without the time of
    making (`created`)."""
    config = json.loads((out / "config.json").read_text())
    config["provenance"].pop("created")
    return comparable_records(out), config, {name: _tensors(out / name) for name in WEIGHTS if (out / name).exists()}


def _no_done_without_weights(out: Path) -> None:
    if (out / "done").exists():
        assert all((out / name).exists() for name in WEIGHTS)


@pytest.mark.parametrize("steps,least", [(1, 8), (3, 12)])  # one checkpoint; two, the second after a resume
def test_train_killed_at_every_write_point_reruns_to_the_uninterrupted_folder(tmp_path, monkeypatch, steps, least):
    out = tmp_path / "run"
    points = kill_everywhere(monkeypatch, out, tmp_path, lambda: shutil.rmtree(out, ignore_errors=True),
                             lambda: train(output_dir=str(out), steps=steps, **TINY), _no_done_without_weights,
                             ignore=("train.log", "results.jsonl", "config.json", *WEIGHTS), same=_run_contents)
    assert points >= least  # config.json, each checkpoint's records, weights and resume state, done, ...


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    dense = dgmoe.create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(root / "base.safetensors"))
    train(output_dir=str(root / "run"), steps=1, pretrained=str(root / "base.safetensors"), peft="lora",
          **TINY)
    return root / "run"


def _adapter_whole(out: Path) -> None:
    if (out / "adapter_config.json").exists():
        assert (out / "adapter_model.safetensors").exists()


def test_export_killed_at_every_write_point_reruns_to_the_uninterrupted_adapter(lora_run, tmp_path, monkeypatch):
    out = tmp_path / "adapter"
    options = PeftExportConfig(run_dir=str(lora_run), out_dir=str(out))
    points = kill_everywhere(monkeypatch, out, tmp_path, lambda: shutil.rmtree(out, ignore_errors=True),
                             lambda: export_peft(options), _adapter_whole)
    assert points == 4  # the weights' bytes and their move, the configuration's


def _make_pacs(data_dir: Path) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.RandomState(0)
    for domain in ("art_painting", "cartoon", "photo", "sketch"):
        for cls in ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person"):
            folder = data_dir / "PACS" / domain / cls
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.randint(0, 256, (10, 11, 3), dtype=np.uint8)).save(folder / "0.png")
    return data_dir


def test_data_prepare_killed_at_every_write_point_reruns_to_the_uninterrupted_cache(tmp_path, monkeypatch):
    data, cache = _make_pacs(tmp_path / "data"), tmp_path / "cache"
    out = cache_folder(cache, "PACS", 8)

    def cache_whole(folder: Path) -> None:  # a manifest names arrays that are there
        if (folder / MANIFEST).exists():
            manifest = json.loads((folder / MANIFEST).read_text())
            assert all((folder / name).exists() for name in manifest["images"] + manifest["labels"])

    def manifest(folder: Path) -> dict:
        return {k: v for k, v in json.loads((folder / MANIFEST).read_text()).items() if k != "seconds_to_build"}

    points = kill_everywhere(monkeypatch, out, tmp_path, lambda: shutil.rmtree(cache, ignore_errors=True),
                             lambda: prepare_dataset("PACS", data, img_size=8, cache_dir=cache), cache_whole,
                             ignore=(MANIFEST,), hidden=(".prepare.lock",), same=manifest)
    assert points == 4 * 3 + 2  # per domain: the images' move, the labels' bytes and move; the manifest's


def test_a_killed_run_folder_left_by_safetensors_own_writer_is_cleaned_on_the_next_start(tmp_path):
    """An earlier dgmoe let safetensors write weights through its own `.tmpXXXXXX`: the next start removes it, from
    an unfinished run folder and from a finished one."""
    out = tmp_path / "run"
    train(output_dir=str(out), steps=1, **TINY)
    reference = folder_state(out, ignore=("train.log", "results.jsonl", "config.json", *WEIGHTS))
    (out / "done").unlink()
    (out / ".tmpAb3dE9").write_bytes(b"half a checkpoint")
    (out / ".tmp_notours").write_bytes(b"kept")
    train(output_dir=str(out), steps=1, **TINY)
    (out / ".tmp_notours").unlink()
    assert folder_state(out, ignore=("train.log", "results.jsonl", "config.json", *WEIGHTS)) == reference
    (out / ".tmpZz9yX8").write_bytes(b"half a checkpoint")  # beside a finished run: the re-run only tidies up
    assert train(output_dir=str(out), steps=1, **TINY).already_done
    assert folder_state(out, ignore=("train.log", "results.jsonl", "config.json", *WEIGHTS)) == reference
