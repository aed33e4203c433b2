"""Hub and Drive sources (`dgmoe.data.fetch_hubs`): the installed huggingface_hub against a loopback Hub (its
resolve endpoint, reached through HF_ENDPOINT), every file checked against the declared sha256, the LFS object's
ETag or its git object id; gdown's answers (replaced by a stand-in module: Drive cannot be reached from a test)
mapped to errors a person can act on. No test leaves 127.0.0.1."""
from __future__ import annotations

import hashlib
import inspect
import sys
import types
from pathlib import Path

import pytest
from loopback import Fault, Loopback

from dgmoe.data.fetch import ChecksumError, SourceError
from dgmoe.data.fetch_hubs import download_drive, download_hub, git_blob_sha1
from dgmoe.errors import UsageError

BODY = bytes(range(256)) * 2000
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture
def hub(monkeypatch):
    pytest.importorskip("huggingface_hub", reason="the hub extra (huggingface_hub) is not installed")
    with Loopback(lifetime=30) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.base)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "3")
        monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "3")
        assert server.base.startswith("http://127.0.0.1:")
        yield server


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_hub_file_is_fetched_through_hf_endpoint_and_checked(hub, tmp_path):
    hub.serve_hub("dgmoe/pacs", "data/train-0.parquet", "3f2a" * 10, BODY)
    dest = download_hub("dgmoe/pacs", "data/train-0.parquet", "3f2a" * 10, tmp_path / "train-0.parquet", sha256=SHA,
                        progress=False)
    assert dest.read_bytes() == BODY and _visible(tmp_path) == ["train-0.parquet"]
    assert all(path.startswith("/datasets/dgmoe/pacs/resolve/") for _, path, _ in hub.log)
    hub.log.clear()
    (tmp_path / ".train-0.parquet.hub" / ".cache").mkdir(parents=True)  # as a kill just after the rename leaves
    assert download_hub("dgmoe/pacs", "data/train-0.parquet", "3f2a" * 10, dest, sha256=SHA) == dest
    assert hub.log == [] and _visible(tmp_path) == ["train-0.parquet"]  # there and matching: no request


def test_a_model_repo_uses_the_model_path(hub, tmp_path):
    hub.serve_hub("facebook/deit", "model.safetensors", "main", BODY, repo_type="model")
    download_hub("facebook/deit", "model.safetensors", "main", tmp_path / "m.safetensors", repo_type="model")
    assert (tmp_path / "m.safetensors").read_bytes() == BODY  # checked against the LFS ETag, none declared
    assert {path for _, path, _ in hub.log} == {"/facebook/deit/resolve/main/model.safetensors"}


def test_a_declared_sha256_the_hub_contradicts_is_refused_before_downloading(hub, tmp_path):
    hub.serve_hub("dgmoe/pacs", "a.zip", "r1", BODY)
    with pytest.raises(ChecksumError) as info:
        download_hub("dgmoe/pacs", "a.zip", "r1", tmp_path / "a.zip", sha256="0" * 64)
    assert SHA in str(info.value) and "0" * 64 in str(info.value) and "\n" not in str(info.value)
    assert {method for method, _, _ in hub.log} == {"HEAD"} and _visible(tmp_path) == []


def test_bytes_that_are_not_the_lfs_object_are_kept_aside(hub, tmp_path):
    hub.serve_hub("dgmoe/pacs", "a.zip", "r1", BODY[:-1] + b"!", claimed=BODY)
    with pytest.raises(ChecksumError, match="kept aside") as info:
        download_hub("dgmoe/pacs", "a.zip", "r1", tmp_path / "a.zip")
    assert info.value.expected == SHA and _visible(tmp_path) == ["a.zip.bad"]


def test_a_file_in_git_is_checked_against_its_object_id(hub, tmp_path):
    hub.serve_hub("dgmoe/pacs", "README.md", "r1", b"# PACS\n", lfs=False)
    assert download_hub("dgmoe/pacs", "README.md", "r1", tmp_path / "README.md").read_bytes() == b"# PACS\n"
    assert git_blob_sha1(tmp_path / "README.md") == hashlib.sha1(b"blob 7\0# PACS\n").hexdigest()
    hub.serve_hub("dgmoe/pacs", "LICENSE", "r1", b"MIT", lfs=False, claimed=b"GPL")
    with pytest.raises(ChecksumError, match="git object id"):
        download_hub("dgmoe/pacs", "LICENSE", "r1", tmp_path / "LICENSE")
    assert not (tmp_path / "LICENSE").exists() and (tmp_path / "LICENSE.bad").read_bytes() == b"MIT"


def test_a_missing_repo_or_file_is_a_source_error_with_its_status(hub, tmp_path):
    with pytest.raises(SourceError) as info:
        download_hub("dgmoe/none", "a.zip", "r1", tmp_path / "a.zip")
    assert info.value.status == 404 and "dgmoe/none@r1" in str(info.value) and "\n" not in str(info.value)
    hub.serve_hub("dgmoe/gated", "a.zip", "r1", BODY, fault=Fault(status=403))
    with pytest.raises(SourceError) as info:
        download_hub("dgmoe/gated", "a.zip", "r1", tmp_path / "a.zip")
    assert info.value.status == 403 and not (tmp_path / "a.zip").exists()


def test_a_truncated_hub_body_ends_whole(hub, tmp_path):
    hub.serve_hub("dgmoe/pacs", "a.zip", "r1", BODY, fault=Fault(truncate_at=100_000))
    assert download_hub("dgmoe/pacs", "a.zip", "r1", tmp_path / "a.zip", sha256=SHA).read_bytes() == BODY
    assert _visible(tmp_path) == ["a.zip"]


def test_a_wrong_repo_type_is_refused(tmp_path):
    with pytest.raises(UsageError, match="repo_type 'space'"):
        download_hub("a/b", "f", "r", tmp_path / "f", repo_type="space")


def test_without_huggingface_hub_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(UsageError, match=r"pip install 'dgmoe\[hub\]'"):
        download_hub("a/b", "f", "r", tmp_path / "f")


# -- Google Drive, through a stand-in for gdown ------------------------------------------------------------------


def _gdown(monkeypatch, behaviour):
    """Install a stand-in `gdown` whose download(id=, output=, quiet=, resume=) does `behaviour(output)`."""
    module = types.ModuleType("gdown")
    calls = []

    def download(*, id, output, quiet, resume):
        calls.append({"id": id, "output": output, "resume": resume})
        return behaviour(Path(output))

    module.download = download
    monkeypatch.setitem(sys.modules, "gdown", module)
    return calls


class FileURLRetrievalError(Exception):
    """gdown's name for a Drive page that gives no file (quota, permission)."""


def test_a_drive_file_is_checked_and_renamed_into_place(tmp_path, monkeypatch):
    def writes(out: Path):
        out.write_bytes(BODY)
        return str(out)

    calls = _gdown(monkeypatch, writes)
    dest = download_drive("1AbC", tmp_path / "pacs.zip", sha256=SHA, progress=False)
    assert dest.read_bytes() == BODY and _visible(tmp_path) == ["pacs.zip"]
    assert calls[0]["id"] == "1AbC" and calls[0]["resume"] is True
    assert Path(calls[0]["output"]).parent.name.startswith(".")  # gdown writes in a hidden staging folder


def test_drive_quota_says_retry_later_or_use_archive(tmp_path, monkeypatch):
    def refuses(out: Path):
        raise FileURLRetrievalError("Too many users have viewed or downloaded this file recently.")

    _gdown(monkeypatch, refuses)
    with pytest.raises(SourceError, match="retry later or use --archive FILE") as info:
        download_drive("1AbC", tmp_path / "pacs.zip")
    assert info.value.status == 403 and "\n" not in str(info.value) and not (tmp_path / "pacs.zip").exists()


def test_drive_http_errors_keep_their_status(tmp_path, monkeypatch):
    class HTTPError(OSError):
        response = types.SimpleNamespace(status_code=404)

    def missing(out: Path):
        raise HTTPError("404 Client Error: Not Found")

    _gdown(monkeypatch, missing)
    with pytest.raises(SourceError) as info:
        download_drive("1AbC", tmp_path / "pacs.zip")
    assert info.value.status == 404


def test_drive_bytes_that_are_not_the_published_file_are_kept_aside(tmp_path, monkeypatch):
    def wrong(out: Path):
        out.write_bytes(b"<html>quota</html>")
        return str(out)

    _gdown(monkeypatch, wrong)
    with pytest.raises(ChecksumError, match=SHA):
        download_drive("1AbC", tmp_path / "pacs.zip", sha256=SHA)
    assert (tmp_path / "pacs.zip.bad").read_bytes() == b"<html>quota</html>" and not (tmp_path / "pacs.zip").exists()


def test_without_gdown_the_error_names_the_extra_and_archive(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gdown", None)
    with pytest.raises(UsageError, match=r"pip install 'dgmoe\[gdrive\]' .*--archive FILE"):
        download_drive("1AbC", tmp_path / "pacs.zip")


def test_the_installed_gdown_takes_the_arguments_used():
    gdown = pytest.importorskip("gdown", reason="the gdrive extra (gdown) is not installed")
    assert {"id", "output", "quiet", "resume"} <= set(inspect.signature(gdown.download).parameters)
    assert hasattr(gdown, "exceptions") and hasattr(gdown.exceptions, "FileURLRetrievalError")


def test_a_kill_before_the_rename_leaves_no_destination_and_the_rerun_fetches_nothing_again(hub, tmp_path,
                                                                                          monkeypatch):
    from dgmoe.data import fetch_hubs

    class Killed(BaseException):
        pass

    def dies(*args, **kw):
        raise Killed

    hub.serve_hub("dgmoe/pacs", "a.zip", "r1", BODY)
    real = fetch_hubs.finish
    monkeypatch.setattr(fetch_hubs, "finish", dies)  # killed with the file downloaded, before its check and rename
    with pytest.raises(Killed):
        download_hub("dgmoe/pacs", "a.zip", "r1", tmp_path / "a.zip", sha256=SHA)
    assert _visible(tmp_path) == [".a.zip.hub"]  # hidden: no data command takes it for data
    monkeypatch.setattr(fetch_hubs, "finish", real)
    assert download_hub("dgmoe/pacs", "a.zip", "r1", tmp_path / "a.zip", sha256=SHA).read_bytes() == BODY
    assert _visible(tmp_path) == ["a.zip"] and [m for m, _, _ in hub.log].count("GET") == 1
