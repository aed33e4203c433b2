"""`dgmoe data check FOLDER --dataset NAME` of a dataset in another published layout (ImageNetShifts, the
DomainBed-OOP lists, Spawrious): the folder is read as `dgmoe train --data-dir FOLDER` reads it, so the layout
`train` accepts passes (exit 0, every domain counted as its loader counts it) and a folder the loader refuses fails
(exit 1) naming what is missing, in one line."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image
from shift_fixtures import write_imagenet_shifts, write_pacs_oop

from dgmoe.data import get_dataset
from dgmoe.data.errors import DatasetError
from dgmoe.data.spawrious import SPAWRIOUS_CLASSES

LOCATIONS = ("beach", "desert", "dirt", "jungle", "mountain", "snow")
SPAWRIOUS = ("SpawriousO2O_easy", "SpawriousM2M_hard")


def _write_spawrious(root: Path) -> Path:
    """`root/spawrious224/{0,1}/<location>/<breed>/NNN.png`, two images a folder."""
    for f in (0, 1):
        for loc in LOCATIONS:
            for breed in SPAWRIOUS_CLASSES:
                folder = root / "spawrious224" / str(f) / loc / breed
                folder.mkdir(parents=True)
                for i in range(2):
                    Image.new("RGB", (8, 8), (100 * f, 10 * i, 0)).save(folder / f"{i:03d}.png")
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("files_kinds")
    write_imagenet_shifts(root / "imagenet")
    write_pacs_oop(root / "oop")
    _write_spawrious(root / "spawrious")
    return {"ImageNetShifts": root / "imagenet", "PACS-OOP": root / "oop", **{n: root / "spawrious" for n in SPAWRIOUS}}


def _check(cli, folder: Path, dataset: str) -> tuple[int, str]:
    result = cli("data", "check", folder, "--dataset", dataset)
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


@pytest.mark.parametrize("dataset", ["ImageNetShifts", "PACS-OOP", *SPAWRIOUS])
def test_the_layout_train_reads_passes_with_the_loaders_counts(data, cli, dataset):
    code, out = _check(cli, data[dataset], dataset)
    assert code == 0, out
    loaded = get_dataset(dataset, data[dataset], img_size=8)
    counts = ", ".join(f"{d} {len(env):,}" for d, env in zip(loaded.domains, loaded.environments))
    total = sum(len(env) for env in loaded.environments)
    assert f"{data[dataset]}: {total:,} images in {len(loaded.domains)} domains ({counts})" in out, out
    assert "error" not in out


def test_the_oop_marks_are_counted(data, cli):
    code, out = _check(cli, data["PACS-OOP"], "PACS-OOP")
    assert code == 0 and "PACS-OOP: pretraining IP 28, OOP 28" in out, out  # (the first of two images per class)


def _bad(data: dict[str, Path], dataset: str, tmp_path: Path, damage) -> Path:
    folder = tmp_path / "bad"
    shutil.copytree(data[dataset], folder)
    damage(folder)
    return folder


def _stray_class(folder: Path) -> None:
    (folder / "sketch" / "not_a_wnid").mkdir()
    shutil.copy(next((folder / "sketch").rglob("*.png")), folder / "sketch" / "not_a_wnid" / "x.png")


def _stray_oop_image(folder: Path) -> None:
    (folder / "PACS" / "photo" / "dog" / "0.png").unlink()


def _empty_shift(folder: Path) -> None:
    for cls in (folder / "imagenet-a").iterdir():
        shutil.rmtree(cls)


BAD = [
    ("ImageNetShifts", lambda f: [shutil.rmtree(f / "imagenet-r"), shutil.rmtree(f / "objectnet-1.0")],
     "lacks imagenet-r/ (ImageNet-R), objectnet-1.0/images/ (ObjectNet)"),
    ("ImageNetShifts", _empty_shift, "ImageNet-A: no images under {folder}/imagenet-a/<class>/"),
    ("ImageNetShifts", _stray_class, "{folder}/sketch/not_a_wnid is not one of its class folders"),
    ("PACS-OOP", lambda f: shutil.rmtree(f / "DomainBed_OOP"), "no {folder}/DomainBed_OOP/hard/PACS"),
    ("PACS-OOP", _stray_oop_image, "{folder}/DomainBed_OOP/hard/PACS/photo/dog/0.png is not in {folder}/PACS"),
    ("SpawriousO2O_easy", lambda f: shutil.rmtree(f / "spawrious224" / "1" / "beach"),
     "{folder}/spawrious224/1/beach/bulldog is missing (domain SC_group_2)"),
    ("SpawriousM2M_hard", lambda f: shutil.rmtree(f / "spawrious224" / "0"), "no spawrious224/0/ under {folder}"),
]


@pytest.mark.parametrize("dataset,damage,named", BAD, ids=["shift-missing", "shift-empty", "stray-class",
                                                          "oop-missing", "oop-stray", "spawrious-location",
                                                          "spawrious-folder"])
def test_a_folder_the_loader_refuses_fails_naming_what_is_missing(data, cli, tmp_path, dataset, damage, named):
    folder = _bad(data, dataset, tmp_path, damage)
    code, out = _check(cli, folder, dataset)
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1, out
    assert lines[0].startswith(f"dgmoe: error: FOLDER {folder} is not {dataset} as `dgmoe train --data-dir {folder}` "
                               "reads it: "), out
    assert named.format(folder=folder) in lines[0], out
    with pytest.raises(DatasetError) as info:  # the loader refuses the same folder, in the same words
        get_dataset(dataset, folder, img_size=8)
    assert named.format(folder=folder) in str(info.value)


def test_without_dataset_the_folder_is_taken_for_the_dataset_whose_loader_reads_it(data, cli):
    result = cli("data", "check", data["ImageNetShifts"])
    assert result.exit_code == 0 and "as --dataset ImageNetShifts reads them" in result.output, result.output
    result = cli("data", "check", data["SpawriousO2O_easy"])  # six challenges read the same folder: name one
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "name one with --dataset" in lines[0], result.output
    assert all(c in lines[0] for c in ("SpawriousO2O_easy", "SpawriousM2M_hard")), lines[0]
