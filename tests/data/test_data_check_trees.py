"""`dgmoe data check` on the trees people really have: a folder `dgmoe train` refuses (a symlink loop, a class
folder that is another class folder, a link into another class) is refused by `data check` too, in the same one
line; empty folders are counted as empty; names that are not UTF-8 are counted (and hashed as the bytes on disk);
100,000 files are counted (slow)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from dgmoe.data.versions import count_folder, files_hash

DOMAINS = ("art_painting", "cartoon", "photo", "sketch")


def _pacs(root, classes=("dog", "cat")):
    for domain in DOMAINS:
        for cls in classes:
            (root / domain / cls).mkdir(parents=True)
            Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(root / domain / cls / "a.png")
    return root


def _one_line(result, code, expected):
    lines = result.output.strip().splitlines()
    assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("dgmoe: error: "), result.output
    assert expected in lines[0] and "Traceback" not in result.output, lines[0]


@pytest.mark.parametrize("link,expected", [
    (("photo/cat/up", ".."), "is the folder {root}/photo/cat again (a symlink loop"),
    (("photo/cat/dogs", "../dog"), "leads into the class folder {root}/photo/dog (a symlink)"),
    (("sketch/horse", "{root}/sketch/dog"), "{root}/sketch/horse is the class folder {root}/sketch/dog again"),
    (("sketch/dog2", "{root}/photo/dog"), "is the class folder"),
], ids=["loop", "into-another-class", "class-is-another-class", "class-in-two-domains"])
def test_data_check_refuses_what_train_refuses(cli, tmp_path, link, expected):
    root = _pacs(tmp_path / "PACS")
    where, target = link
    os.symlink(target.format(root=root), root / where)
    expected = expected.format(root=root)
    _one_line(cli("data", "check", root, "--dataset", "PACS"), 2, expected)
    out = tmp_path / "run"
    _one_line(cli("train", "--dataset", "ImageFolder", "--data-dir", root, "--img-size", "28", "--model",
                  "vit_micro_patch7_28", "--steps", "1", "--output-dir", out, "--progress", "none"), 2, expected)
    assert not out.exists()


def test_data_check_counts_empty_folders_as_empty(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("data", "check", empty, "--dataset", "PACS")
    assert "0 images in 0 domains" in result.output and "Traceback" not in result.output, result.output
    root = _pacs(tmp_path / "PACS")
    (root / "photo" / "horse").mkdir()  # an empty class folder
    (root / "extra").mkdir()  # an empty domain folder
    result = cli("data", "check", root, "--dataset", "PACS")
    assert "8 images in 5 domains (art_painting 2, cartoon 2, extra 0, photo 2, sketch 2)" in result.output
    assert "domain extra is not in the version (0 images)" in result.output and "Traceback" not in result.output


def test_data_check_counts_names_that_are_not_utf8(cli, tmp_path):
    root = _pacs(tmp_path / "PACS")
    os.makedirs(os.path.join(os.fsencode(root), b"photo", b"caf\xe9"))  # Latin-1, not UTF-8
    open(os.path.join(os.fsencode(root), b"photo", b"caf\xe9", b"\xff.png"), "wb").close()
    result = cli("data", "check", root, "--dataset", "PACS")  # a stand-in: no known version (exit 1), counted
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "9 images in 4 domains (art_painting 2, cartoon 2, photo 3, sketch 2)" in result.output
    found = count_folder(root)
    lines = [f"{d}/{c}/a.png" for d in DOMAINS for c in ("cat", "dog")] + ["photo/caf\udce9/\udcff.png"]
    assert found.files_sha256 == files_hash(lines)  # the bytes on disk, hashed as they are


@pytest.mark.slow
def test_data_check_counts_a_hundred_thousand_files(cli, tmp_path):
    root = tmp_path / "PACS"
    n = 0
    for domain in DOMAINS:
        for c in range(25):
            folder = os.path.join(os.fsencode(root), domain.encode(), b"class\xe9%d" % c)
            os.makedirs(folder)
            for i in range(1000):
                open(os.path.join(folder, b"%d.png" % i), "wb").close()
                n += 1
    assert n == 100_000
    result = cli("data", "check", root, "--dataset", "PACS")  # no known version (exit 1, the gate), all counted
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "100,000 images in 4 domains (art_painting 25,000, cartoon 25,000, photo 25,000, sketch 25,000)" \
        in result.output
