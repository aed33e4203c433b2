"""Safe, atomic extraction (`dgmoe.data.unpack.unpack`): a zip, a tar.gz or a plain file becomes the target folder
whole; a tar-slip member, an absolute path, a link out, a device file, a FIFO and a zip bomb are refused naming the
member with nothing left behind; an existing folder is replaced only when asked, atomically; a kill while
extracting or swapping leaves nothing a reader takes for data, and the same call then completes."""
from __future__ import annotations

import io
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from kill_points import Killed, kill_everywhere
from loopback import device_file, make_tar, make_tar_with, make_zip, member, symlink_out, tar_slip, zip_bomb

from dgmoe.data import unpack as unpack_module
from dgmoe.data.unpack import UnsafeArchiveError, unpack
from dgmoe.errors import DiskFullError, UsageError

FILES = {"kfold/photo/dog/1.jpg": b"\xff\xd8dog", "kfold/art/cat/2.jpg": b"\xff\xd8cat"}


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _nothing_left(data: Path) -> None:
    assert sorted(p.name for p in data.iterdir()) == [], "a refused archive left something behind"


@pytest.mark.parametrize("build", [make_zip, make_tar], ids=["zip", "tar.gz"])
def test_an_archive_becomes_the_target_whole(tmp_path, build):
    archive = build(tmp_path / "a.bin", FILES)
    data = tmp_path / "DATA"
    assert unpack(archive, data / "PACS", members_root="kfold") == data / "PACS"
    assert _tree(data / "PACS") == {"photo/dog/1.jpg": b"\xff\xd8dog", "art/cat/2.jpg": b"\xff\xd8cat"}
    assert [p.name for p in data.iterdir()] == ["PACS"]  # no temporary folder left
    whole = tmp_path / "whole"
    unpack(archive, whole)
    assert _tree(whole) == FILES


def test_a_plain_file_is_copied(tmp_path):
    (tmp_path / "metadata.csv").write_text("a,b\n")
    unpack(tmp_path / "metadata.csv", tmp_path / "DATA" / "wilds")
    assert _tree(tmp_path / "DATA" / "wilds") == {"metadata.csv": b"a,b\n"}


def test_a_members_root_that_is_not_there_is_refused(tmp_path):
    archive = make_zip(tmp_path / "a.zip", FILES)
    with pytest.raises(UsageError, match=r"nothing under PACS/ .*top-level names: kfold\)"):
        unpack(archive, tmp_path / "DATA" / "PACS", members_root="PACS")
    _nothing_left(tmp_path / "DATA")


def _refused(tmp_path: Path, archive: Path, member_name: str, why: str, **kw) -> None:
    data = tmp_path / "DATA"
    with pytest.raises(UnsafeArchiveError, match=why) as info:
        unpack(archive, data / "PACS", **kw)
    assert info.value.member == member_name and member_name in str(info.value) and "\n" not in str(info.value)
    _nothing_left(data)
    assert not (tmp_path.parent / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()


def test_tar_slip_is_refused_naming_the_member(tmp_path):
    _refused(tmp_path, tar_slip(tmp_path / "slip.tar.gz"), "../../evil.txt", "'..'")


def test_zip_slip_and_absolute_paths_are_refused(tmp_path):
    _refused(tmp_path, make_zip(tmp_path / "slip.zip", {"ok.txt": b"1", "a/../../evil.txt": b"x"}),
             "a/../../evil.txt", "'..'")
    _refused(tmp_path, make_tar(tmp_path / "abs.tar.gz", {"/tmp/evil.txt": b"x"}), "/tmp/evil.txt", "absolute")


def test_a_symlink_out_is_refused_and_one_inside_is_kept(tmp_path):
    _refused(tmp_path, symlink_out(tmp_path / "link.tar.gz"), "PACS/link", "absolute path '/etc/passwd'")
    _refused(tmp_path, make_tar_with(tmp_path / "rel.tar.gz", {"PACS/a": b"1"},
                                     member("PACS/sub/link", tarfile.SYMTYPE, "../../../x")), "PACS/sub/link",
             "pointing out of the folder")
    inside = make_tar_with(tmp_path / "in.tar.gz", {"PACS/a": b"1"}, member("PACS/b", tarfile.SYMTYPE, "a"))
    unpack(inside, tmp_path / "ok")
    assert (tmp_path / "ok" / "PACS" / "b").is_symlink() and (tmp_path / "ok" / "PACS" / "b").read_bytes() == b"1"


def test_a_zip_symlink_out_is_refused(tmp_path):
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as z:
        info = zipfile.ZipInfo("PACS/link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(info, "../../etc/passwd")
    _refused(tmp_path, archive, "PACS/link", "pointing out of the folder")


def test_a_hard_link_out_is_refused_and_one_inside_is_kept(tmp_path):
    _refused(tmp_path, make_tar_with(tmp_path / "hard.tar.gz", {"PACS/a": b"1"},
                                     member("PACS/h", tarfile.LNKTYPE, "../outside")), "PACS/h", "pointing out")
    _refused(tmp_path, make_tar_with(tmp_path / "habs.tar.gz", {"PACS/a": b"1"},
                                     member("PACS/h", tarfile.LNKTYPE, "/etc/passwd")), "PACS/h", "absolute")
    inside = make_tar_with(tmp_path / "hin.tar.gz", {"PACS/a": b"1"}, member("PACS/h", tarfile.LNKTYPE, "PACS/a"))
    unpack(inside, tmp_path / "ok")
    assert (tmp_path / "ok" / "PACS" / "h").read_bytes() == b"1"


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE], ids=["chr", "blk", "fifo"])
def test_device_files_and_fifos_are_refused(tmp_path, kind):
    archive = make_tar_with(tmp_path / "dev.tar.gz", {"PACS/a": b"1"}, member("PACS/dev", kind))
    _refused(tmp_path, archive, "PACS/dev", "device file, FIFO")


def test_the_device_builder_is_refused(tmp_path):
    _refused(tmp_path, device_file(tmp_path / "dev.tar.gz"), "PACS/dev", "device file")


def test_a_zip_bomb_is_refused_before_inflating(tmp_path):
    bomb = zip_bomb(tmp_path / "bomb.zip")
    assert bomb.stat().st_size * 500 < 32 << 20  # a ratio far past what images or text reach
    _refused(tmp_path, bomb, "PACS/zeros.bin", "zip bomb")


def test_a_declared_size_bounds_a_tar_too(tmp_path):
    archive = make_tar(tmp_path / "big.tar.gz", {"PACS/a": b"1" * 1000, "PACS/b": b"2" * 1000})
    _refused(tmp_path, archive, "PACS/b", "past 1500 bytes", max_bytes=1500)
    unpack(archive, tmp_path / "DATA" / "PACS", max_bytes=2000)


def test_an_existing_folder_is_replaced_only_when_asked(tmp_path):
    target = tmp_path / "DATA" / "PACS"
    target.mkdir(parents=True)
    (target / "old.txt").write_text("old")
    archive = make_zip(tmp_path / "a.zip", FILES)
    with pytest.raises(UsageError, match="already exists; --force replaces it"):
        unpack(archive, target, members_root="kfold")
    assert _tree(target) == {"old.txt": b"old"}
    unpack(archive, target, members_root="kfold", replace=True)
    assert set(_tree(target)) == {"photo/dog/1.jpg", "art/cat/2.jpg"}
    assert [p.name for p in target.parent.iterdir()] == ["PACS"]


def test_a_corrupt_archive_is_one_line_and_leaves_nothing(tmp_path):
    good = make_tar(tmp_path / "a.tar.gz", {f"PACS/{i}.jpg": bytes(range(256)) * 64 for i in range(20)})
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(UsageError, match="not a readable archive .* download it again"):
        unpack(cut, tmp_path / "DATA" / "PACS")
    _nothing_left(tmp_path / "DATA")


def test_short_disk_space_refuses_a_zip_before_writing(tmp_path, monkeypatch):
    archive = make_zip(tmp_path / "a.zip", FILES)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: type("Usage", (), {"free": 3})())
    with pytest.raises(DiskFullError, match="not enough free space"):
        unpack(archive, tmp_path / "DATA" / "PACS")
    _nothing_left(tmp_path / "DATA")


def test_a_kill_mid_extraction_leaves_only_a_hidden_folder_the_rerun_removes(tmp_path, monkeypatch):
    archive = make_zip(tmp_path / "a.zip", FILES)
    data = tmp_path / "DATA"
    real, calls = zipfile.ZipFile.extract, []

    def dies(self, *args, **kw):
        if calls:
            raise Killed
        calls.append(1)
        return real(self, *args, **kw)

    monkeypatch.setattr(zipfile.ZipFile, "extract", dies)
    monkeypatch.setattr(unpack_module.os, "getpid", lambda: 999_999_999)  # a process that is gone by the re-run
    with pytest.raises(Killed):
        unpack(archive, data / "PACS", members_root="kfold")
    # SIGKILL runs no cleanup: put back what the exception's unwinding removed
    leftover = data / ".PACS.999999999.partial"
    (leftover / "photo" / "dog").mkdir(parents=True, exist_ok=True)
    (leftover / "photo" / "dog" / "1.jpg").write_bytes(b"\xff\xd8dog")
    assert [p.name for p in data.iterdir()] == [".PACS.999999999.partial"]
    monkeypatch.undo()
    unpack(archive, data / "PACS", members_root="kfold")
    assert [p.name for p in data.iterdir()] == ["PACS"] and len(_tree(data / "PACS")) == 2


def test_a_kill_at_every_swap_point_leaves_old_or_new_whole_and_the_rerun_completes(tmp_path, monkeypatch):
    archive = make_tar(tmp_path / "a.tar.gz", FILES)
    data = tmp_path / "DATA"

    def begin():
        shutil.rmtree(data, ignore_errors=True)
        (data / "PACS").mkdir(parents=True)
        (data / "PACS" / "old.txt").write_text("old")

    def whole(out: Path):
        visible = [p for p in out.iterdir() if not p.name.startswith(".")]
        assert [p.name for p in visible] in ([], ["PACS"])
        if visible:
            assert _tree(out / "PACS") in ({"old.txt": b"old"}, {"photo/dog/1.jpg": b"\xff\xd8dog",
                                                                 "art/cat/2.jpg": b"\xff\xd8cat"})

    def command():
        unpack(archive, data / "PACS", members_root="kfold", replace=True)

    points = kill_everywhere(monkeypatch, data, tmp_path / "kills", begin, command, whole)
    assert points >= 3  # move the old folder aside, move the new one in, delete the old


def test_tar_members_are_streamed_once(tmp_path):
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w:gz") as t:
        for name, data in FILES.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    (tmp_path / "a.tgz").write_bytes(payload.getvalue())
    unpack(tmp_path / "a.tgz", tmp_path / "out", members_root="kfold/")
    assert set(_tree(tmp_path / "out")) == {"photo/dog/1.jpg", "art/cat/2.jpg"}


def test_zip_absolute_paths_and_devices_are_refused(tmp_path):
    archive = tmp_path / "abs.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(zipfile.ZipInfo("/etc/evil.txt"), b"x")
    _refused(tmp_path, archive, "/etc/evil.txt", "absolute")
    archive = tmp_path / "dev.zip"
    with zipfile.ZipFile(archive, "w") as z:
        info = zipfile.ZipInfo("PACS/fifo")
        info.external_attr = (stat.S_IFIFO | 0o644) << 16
        z.writestr(info, b"")
    _refused(tmp_path, archive, "PACS/fifo", "device file, FIFO")


def test_a_tar_gz_bomb_is_refused_by_the_default_ratio(tmp_path):
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz", compresslevel=9) as t:
        info = tarfile.TarInfo("PACS/zeros.bin")
        info.size = 32 << 20
        t.addfile(info, io.BytesIO(bytes(info.size)))
    assert bomb.stat().st_size * unpack_module.DEFAULT_RATIO < 32 << 20
    _refused(tmp_path, bomb, "PACS/zeros.bin", "zip bomb")
