"""`dgmoe data download` end to end against a loopback server (no test leaves 127.0.0.1): a small archive in the
source's real layout installed and recorded, every source failing, a checksum mismatch, an existing folder,
--force, --archive, DomainBed's TerraIncognita conversion, and a kill at every write point (download, extraction,
swap) that leaves nothing a reader would take for data and is continued by the same command."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from kill_points import kill_everywhere
from loopback import Fault, Loopback, tar_bytes, zip_bytes

from dgmoe.data import install as install_mod
from dgmoe.data.content import SOURCE_RECORD, fingerprint
from dgmoe.data.sources import Download, Part, Source

PACS_FILES = {f"kfold/{d}/{c}/{i}.jpg": f"{d}-{c}-{i}".encode() * 50
              for d in ("art_painting", "cartoon", "photo", "sketch") for c in ("dog", "horse") for i in range(2)}


@pytest.fixture
def server():
    with Loopback(lifetime=60) as s:
        yield s


def _declare(monkeypatch, *downloads: Download) -> None:
    monkeypatch.setattr(install_mod, "downloads", lambda: {d.name: d for d in downloads})


def test_pacs_layout_zip_from_a_mirror_is_installed_checked_and_recorded(cli, server, tmp_path):
    body = zip_bytes(PACS_FILES)
    url = server.serve("PACS.zip", body)
    result = cli("data", "download", "PACS", "--data-dir", tmp_path / "DATA", "--mirror", url)
    assert result.exit_code == 0, result.output
    root = tmp_path / "DATA" / "PACS"
    assert (root / "photo" / "horse" / "1.jpg").read_bytes() == PACS_FILES["kfold/photo/horse/1.jpg"]
    record = json.loads((root / SOURCE_RECORD).read_text())
    assert record["content_sha256"] == fingerprint(root).sha256
    assert record["archives"] == {"PACS.zip": hashlib.sha256(body).hexdigest()}
    assert record["source"] == f"--mirror {url}" and record["urls"] == [url] and record["dgmoe_version"]
    # 16 images are not the 9,991 of the official release: said so, never "official"
    assert "unknown fingerprint" in result.output and "official" not in result.output.replace("official (", "")
    assert "not verified" in result.output
    assert sorted(p.name for p in (tmp_path / "DATA").iterdir()) == [".dgmoe-downloads", "PACS"]
    check = cli("data", "check", root)
    assert f"content fingerprint {record['content_sha256']}" in check.output and "--mirror" in check.output
    again = cli("data", "download", "PACS", "--data-dir", tmp_path / "DATA", "--mirror", url)
    assert again.exit_code == 0 and "already installed, unchanged" in again.output


def test_every_source_failing_lists_each_source_and_its_error(cli, server, tmp_path, monkeypatch):
    gone = server.serve("gone.zip", b"", Fault(status=410))
    missing = server.serve("missing.zip", b"", Fault(status=404))
    _declare(monkeypatch, Download("Toy", "toy", (), (
        Source("the original", "http", (Part(gone, "toy.zip"),), "l"),
        Source("a mirror", "http", (Part(missing, "toy.zip"),), "l"),
        Source("by hand", "manual", (Part("https://example.org/form", "toy.zip"),), "l"))))
    result = cli("data", "download", "Toy", "--data-dir", tmp_path)
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("dgmoe: error: Toy: every source failed: [1] the original (http): ")
    assert "410" in line and "[2] a mirror (http): " in line and "404" in line
    assert "[3] by hand (manual): a licence is accepted by hand here: fetch toy.zip from https://example.org/form" \
        in line and "--archive FILE" in line
    assert not (tmp_path / "toy").exists()


def test_a_checksum_mismatch_is_refused_naming_both_values_and_the_next_source_is_tried(cli, server, tmp_path,
                                                                                         monkeypatch):
    good = zip_bytes({"toy/a/x/1.jpg": b"good"})
    bad_url = server.serve("bad.zip", zip_bytes({"toy/a/x/1.jpg": b"evil"}))
    good_url = server.serve("good.zip", good)
    md5 = hashlib.md5(good).hexdigest()
    _declare(monkeypatch, Download("Toy", "toy", (), (
        Source("the original", "http", (Part(bad_url, "toy.zip", md5=md5, root="toy"),), "l"),
        Source("a mirror", "http", (Part(good_url, "toy.zip", md5=md5, root="toy"),), "l"))))
    result = cli("data", "download", "Toy", "--data-dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "toy" / "a" / "x" / "1.jpg").read_bytes() == b"good"
    # only the first source's bytes were wrong: the second was used; now with no good source at all
    _declare(monkeypatch, Download("Toy2", "toy2", (), (
        Source("the original", "http", (Part(bad_url, "toy.zip", md5=md5, root="toy"),), "l"),)))
    failed = cli("data", "download", "Toy2", "--data-dir", tmp_path)
    assert failed.exit_code == 1 and md5 in failed.output, failed.output
    assert hashlib.md5(zip_bytes({"toy/a/x/1.jpg": b"evil"})).hexdigest() in failed.output
    assert not (tmp_path / "toy2").exists()
    kept = [p for p in (tmp_path / ".dgmoe-downloads" / "Toy2").rglob("*") if p.is_file()]
    assert kept and all(p.suffix in (".bad", ".rejected") for p in kept)


def test_an_existing_folder_that_differs_is_refused_unless_force(cli, server, tmp_path):
    url = server.serve("PACS.zip", zip_bytes(PACS_FILES))
    mine = tmp_path / "PACS" / "photo" / "dog"
    mine.mkdir(parents=True)
    (mine / "own.jpg").write_bytes(b"mine")
    refused = cli("data", "download", "PACS", "--data-dir", tmp_path, "--mirror", url)
    assert refused.exit_code == 2 and "--force" in refused.output and "not installed by dgmoe" in refused.output
    assert (mine / "own.jpg").read_bytes() == b"mine"
    forced = cli("data", "download", "PACS", "--data-dir", tmp_path, "--mirror", url, "--force")
    assert forced.exit_code == 0, forced.output
    assert not (mine / "own.jpg").exists() and (tmp_path / "PACS" / "sketch" / "dog" / "0.jpg").is_file()
    (tmp_path / "PACS" / "sketch" / "dog" / "0.jpg").write_bytes(b"changed")  # no longer what the record says
    changed = cli("data", "download", "PACS", "--data-dir", tmp_path, "--mirror", url)
    assert changed.exit_code == 2 and "differs from what its .dgmoe-source.json records" in changed.output


def test_archive_fetched_another_way_goes_through_the_same_checks(cli, tmp_path):
    archive = tmp_path / "PACS.zip"
    archive.write_bytes(zip_bytes(PACS_FILES))
    result = cli("data", "download", "PACS", "--data-dir", tmp_path / "DATA", "--archive", archive)
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "DATA" / "PACS" / SOURCE_RECORD).read_text())
    assert record["source"] == f"--archive {archive}" and record["kind"] == "manual"
    assert archive.is_file()  # the user's file is left where it was


def test_flag_mistakes_and_unknown_names_are_one_line_each(cli, tmp_path):
    typo = cli("data", "download", "PCAS", "--data-dir", tmp_path)
    assert typo.exit_code == 2 and "did you mean PACS?" in typo.output
    assert cli("data", "download", "PACS").exit_code == 2
    assert cli("data", "download", "--data-dir", tmp_path).exit_code == 2
    both = cli("data", "download", "PACS", "VLCS", "--data-dir", tmp_path, "--mirror", "http://127.0.0.1:9/x")
    assert both.exit_code == 2 and "name one dataset" in both.output
    none = cli("data", "download", "TerraIncognita-24788", "--data-dir", tmp_path)
    assert none.exit_code == 1 and "no public source" in none.output
    assert cli("data", "download", "Debug", "--data-dir", tmp_path).exit_code == 2
    oop = cli("data", "download", "PACS-OOP", "--data-dir", tmp_path)
    assert oop.exit_code == 2 and "name them (PACS DomainBed-OOP)" in oop.output
    assert list(tmp_path.iterdir()) == []


def test_terra_incognita_is_converted_as_domainbed_does(cli, server, tmp_path):
    images = {f"eccv_18_all_images_sm/{n}.jpg": n.encode() for n in ("a", "b", "c", "d")}
    labels = {"images": [{"id": "a", "file_name": "a.jpg", "location": "38"},
                         {"id": "b", "file_name": "b.jpg", "location": "100"},
                         {"id": "c", "file_name": "c.jpg", "location": "7"},    # not one of DomainBed's four
                         {"id": "d", "file_name": "d.jpg", "location": "46"}],
              "categories": [{"id": 1, "name": "bobcat"}, {"id": 2, "name": "car"}],
              "annotations": [{"image_id": "a", "category_id": 1}, {"image_id": "b", "category_id": 1},
                              {"image_id": "c", "category_id": 1}, {"image_id": "d", "category_id": 2}]}
    server.serve("t/eccv_18_all_images_sm.tar.gz", tar_bytes(images))
    annotations = zip_bytes({"caltech_images_20210113.json": json.dumps(labels).encode()})
    server.serve("t/caltech_camera_traps.json.zip", annotations)
    result = cli("data", "download", "TerraIncognita", "--data-dir", tmp_path, "--mirror", server.base + "/t/")
    assert result.exit_code == 0, result.output
    root = tmp_path / "terra_incognita"
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == [SOURCE_RECORD, "location_100/bobcat/b.jpg", "location_38/bobcat/a.jpg"]
    assert "unknown fingerprint" in result.output


def test_a_kill_at_any_write_point_leaves_no_data_and_the_same_command_finishes(server, tmp_path, monkeypatch):
    url = server.serve("PACS.zip", zip_bytes(PACS_FILES))
    out = tmp_path / "DATA"

    def begin():
        import shutil
        shutil.rmtree(out, ignore_errors=True)

    def command():
        install_mod.install("PACS", out, mirror=url, progress=False, echo=lambda line: None)

    def whole(folder: Path):  # a reader sees no dataset folder, or the whole one with its record
        pacs = folder / "PACS"
        if pacs.exists():
            assert (pacs / SOURCE_RECORD).is_file() and len([p for p in pacs.rglob("*.jpg")]) == 16

    def same(folder: Path):
        record = json.loads((folder / "PACS" / SOURCE_RECORD).read_text())
        return {k: v for k, v in record.items() if k != "date"}

    points = kill_everywhere(monkeypatch, out, tmp_path / "scratch", begin, command, whole,
                             ignore=(SOURCE_RECORD,), hidden=(".dgmoe-downloads", SOURCE_RECORD), same=same)
    assert points >= 3  # the download's rename, the extraction's swap, the dataset's swap (and the record)


def test_plain_files_with_a_published_md5_each_and_a_wrong_archive_of_ones_own_is_left_in_place(cli, server,
                                                                                               tmp_path, monkeypatch):
    files = {"train.gz": b"t" * 100, "test.gz": b"s" * 50}
    for name, body in files.items():
        server.serve(f"m/{name}", body)
    parts = tuple(Part(f"{server.base}/m/{n}", n, len(b), hashlib.md5(b).hexdigest(), unpack=False, into="raw")
                  for n, b in files.items())
    _declare(monkeypatch, Download("Digits", "digits", (), (Source("original", "http", parts, "l"),)),
             Download("One", "one", (), (Source("original", "http", (Part("http://127.0.0.1:9/one.zip", "one.zip",
                                                                          md5="0" * 32, root="one"),), "l"),)))
    result = cli("data", "download", "Digits", "--data-dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "digits" / "raw").iterdir()} == files
    mine = tmp_path / "mine.zip"
    mine.write_bytes(zip_bytes({"one/a/b/1.jpg": b"1"}))
    wrong = cli("data", "download", "One", "--data-dir", tmp_path, "--archive", mine)
    assert wrong.exit_code == 1 and "0" * 32 in wrong.output and hashlib.md5(mine.read_bytes()).hexdigest() in \
        wrong.output
    assert mine.is_file() and not (tmp_path / "one").exists()
