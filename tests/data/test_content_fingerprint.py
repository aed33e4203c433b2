"""Content fingerprints (`dgmoe data check --content`): what the fingerprint covers, and the real PACS against
the fingerprint dgmoe ships (skipped when ../shared/data/PACS is absent)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dgmoe.data.content import SOURCE_RECORD, file_differences, fingerprint, read_per_file
from dgmoe.data.versions import PACS

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)
    return root


def test_fingerprint_covers_paths_and_bytes_but_not_the_source_record(tmp_path):
    a = fingerprint(_tree(tmp_path / "a", {"d/c/1.jpg": b"one", "d/c/2.jpg": b"two"}))
    assert fingerprint(_tree(tmp_path / "b", {"d/c/2.jpg": b"two", "d/c/1.jpg": b"one"})).sha256 == a.sha256
    assert fingerprint(_tree(tmp_path / "c", {"d/c/1.jpg": b"one", "d/c/3.jpg": b"two"})).sha256 != a.sha256
    assert fingerprint(_tree(tmp_path / "e", {"d/c/1.jpg": b"one", "d/c/2.jpg": b"twO"})).sha256 != a.sha256
    # moving a byte across the boundary of two files changes it too (each file's size is hashed)
    assert fingerprint(_tree(tmp_path / "f", {"d/c/1.jpg": b"on", "d/c/2.jpg": b"etwo"})).sha256 != a.sha256
    (tmp_path / "a" / SOURCE_RECORD).write_text("{}")
    again = fingerprint(tmp_path / "a")
    assert again.sha256 == a.sha256 and SOURCE_RECORD not in again.files and again.nbytes == 6


def test_file_differences_name_the_files():
    out = file_differences({"a": "1", "b": "2", "x": "9"}, {"a": "1", "b": "3", "c": "4"})
    assert out == ["1 file(s) changed: b", "1 file(s) missing: c", "1 file(s) not in the version: x"]


def test_the_shipped_pacs_digests_match_its_fingerprint_declaration():
    (official,) = PACS
    files = read_per_file(official.content_files)
    assert len(files) == official.total == 9991
    assert all(p.count("/") == 2 for p in files)


needs_pacs = pytest.mark.skipif(not (SHARED / "PACS").is_dir(), reason=f"PACS not found under {SHARED}")


@needs_pacs
def test_real_pacs_has_the_official_fingerprint(cli):
    result = cli("data", "check", "--content", SHARED / "PACS")
    assert result.exit_code == 0, result.output
    assert f"official PACS (official (9,991 images)): content fingerprint {PACS[0].content_sha256}" in result.output


@needs_pacs
def test_one_changed_byte_in_one_image_exits_1_naming_the_file(cli, tmp_path):
    copy = tmp_path / "PACS"
    try:
        shutil.copytree(SHARED / "PACS", copy, copy_function=os.link)  # hard links: no 200 MB copy
    except OSError:
        shutil.copytree(SHARED / "PACS", copy)
    victim = copy / "photo" / "horse" / sorted(os.listdir(copy / "photo" / "horse"))[3]
    body = bytearray(victim.read_bytes())
    body[len(body) // 2] ^= 0x01
    victim.unlink()  # a new file: the hard-linked original stays as it was
    victim.write_bytes(bytes(body))
    result = cli("data", "check", "--content", copy)
    assert result.exit_code == 1, result.output
    assert "unknown fingerprint" in result.output and "official PACS" not in result.output
    assert f"1 file(s) changed: photo/horse/{victim.name}" in result.output


@needs_pacs
def test_download_calls_the_real_pacs_official_and_a_changed_copy_unknown(tmp_path):
    from dgmoe.data.install import find, identify

    pacs = find("PACS")
    assert identify(pacs, SHARED / "PACS", fingerprint(SHARED / "PACS")).startswith("official PACS (")
    few = _tree(tmp_path / "PACS", {"photo/dog/1.jpg": b"x"})
    assert identify(pacs, few, fingerprint(few)).startswith("unknown fingerprint ")
