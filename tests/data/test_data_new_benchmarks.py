"""Spawrious (six challenges, DomainBed's file selection) and NICO++ (its six public DG domains) as catalogue
declarations, read from stand-in folders in their published layouts: listed by `dgmoe data list`, trained by
`dgmoe train`."""
from pathlib import Path

import pytest
from PIL import Image

import dgmoe.data.spawrious as spawrious
from dgmoe.data import get_dataset
from dgmoe.data.spawrious import CHALLENGES, SPAWRIOUS_CLASSES, Challenge

LOCATIONS = ("beach", "desert", "dirt", "jungle", "mountain", "snow")


def spawrious_stand_in(root: Path, per_folder: int = 5) -> Path:
    """`root/spawrious224/{0,1}/<location>/<breed>/NNN.png`: the pixel colour encodes folder, location, breed."""
    for f in (0, 1):
        for li, loc in enumerate(LOCATIONS):
            for bi, breed in enumerate(SPAWRIOUS_CLASSES):
                folder = root / "spawrious224" / str(f) / loc / breed
                folder.mkdir(parents=True)
                for i in range(per_folder):
                    Image.new("RGB", (8, 8), (100 * f, 40 * li, 60 * bi)).save(folder / f"{i:03d}.png")
    return root


def test_challenges_follow_domainbeds_combinations(monkeypatch):
    easy = next(c for c in CHALLENGES if c.name == "SpawriousO2O_easy")
    test, g1, g2 = easy.parts()
    assert ("0/desert", "bulldog", 3072) in g1 and ("1/desert", "bulldog", 2756) in g2
    assert ("0/beach", "corgi", 96) in g1 and ("1/beach", "corgi", 412) in g2  # the filler: 3,168 per breed
    assert sum(n for _, b, n in g1 if b == "labrador") == 3168
    assert {("0/dirt", "bulldog", None), ("1/dirt", "bulldog", None)} <= set(test)
    m2m = Challenge("M", ("a", "b", "c", "d"), ("w", "x", "y", "z"))
    test, g1, g2 = m2m.parts()
    assert ("0/a", "bulldog", 3168) in g1 and ("0/b", "bulldog", 3168) in g2
    assert ("0/b", "dachshund", 3168) in g1 and ("0/d", "labrador", 3168) in g2
    assert {("0/w", "bulldog", None), ("0/x", "bulldog", None), ("0/z", "corgi", None)} <= set(test)
    assert len(CHALLENGES) == 6


def test_a_spawrious_stand_in_loads_with_domainbeds_selection(tmp_path, monkeypatch):
    monkeypatch.setattr(spawrious, "PER_BREED", 4)  # 97% of 4 -> 3 correlated + 1 filler image per breed
    data = spawrious_stand_in(tmp_path)
    ds = get_dataset("SpawriousO2O_easy", data, img_size=8)
    assert ds.domains == ["Test", "SC_group_1", "SC_group_2"] and ds.classes == list(SPAWRIOUS_CLASSES)
    assert ds.sizes() == [4 * 2 * 5, 4 * 4, 4 * 4]  # test: all files of both folders; train: 4 per breed
    x, y = ds.environments[1][0]
    assert x.shape == (3, 8, 8) and int(y) == SPAWRIOUS_CLASSES.index("bulldog")
    assert int(x[1, 0, 0]) == 40 * LOCATIONS.index("desert") and int(x[0, 0, 0]) == 0  # folder 0, desert


def test_spawrious_and_nico_are_listed_and_train(tmp_path, cli):
    listing = cli("data", "list").output
    assert all(c.name in listing for c in CHALLENGES) and "NICOpp" in listing
    data = spawrious_stand_in(tmp_path / "data", per_folder=3)
    for dom in ("autumn", "dim", "grass", "outdoor", "rock", "water"):
        for c in range(60):  # NICO++'s 60 classes, one image each
            folder = tmp_path / "data" / "NICO" / dom / f"class{c:02d}"
            folder.mkdir(parents=True)
            Image.new("RGB", (8, 8), (4 * c, 90, 30)).save(folder / "0.jpg")
    for dataset in ("SpawriousM2M_hard", "NICOpp"):
        result = cli("train", "--dataset", dataset, "--data-dir", data, "--model", "vit_micro_patch7_28",
                     "--model-kwargs", '{"depth": 1}', "--img-size", "28", "--steps", "2", "--checkpoint-freq", "1",
                     "--test-envs", "0", "--output-dir", tmp_path / "runs" / dataset, "--progress", "none",
                     "--num-threads", "1", "--hparams", '{"batch_size": 2}')
        assert result.exit_code == 0, (dataset, result.output)
        assert (tmp_path / "runs" / dataset / "done").exists()


def test_a_missing_spawrious_folder_names_what_is_expected(tmp_path, cli):
    result = cli("train", "--dataset", "SpawriousO2O_hard", "--data-dir", tmp_path, "--model", "vit_micro_patch7_28",
                 "--steps", "1", "--output-dir", tmp_path / "out", "--progress", "none")
    assert result.exit_code == 2 and "spawrious224" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", [c.name for c in CHALLENGES])
def test_every_challenge_loads_its_stand_in(tmp_path, monkeypatch, name):
    monkeypatch.setattr(spawrious, "PER_BREED", 4)
    ds = get_dataset(name, spawrious_stand_in(tmp_path, per_folder=4), img_size=8)
    assert ds.sizes()[1] == ds.sizes()[2] == 16
