"""Downloads (`dgmoe.data.fetch.download`) against a loopback server that misbehaves on purpose: every byte is
checked against the published checksum, a broken or killed download continues from its .part, a server without
Range restarts cleanly, 5xx and short bodies are retried with backoff, 404/410/403 are not, and nothing
half-written ever sits at the destination. No test leaves 127.0.0.1."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback import Fault, Loopback

from dgmoe.data import fetch
from dgmoe.data.fetch import ChecksumError, SourceError, download, md5_file, sha256_file
from dgmoe.errors import DiskFullError, UsageError

BODY = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(BODY).hexdigest()
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def server():
    with Loopback(lifetime=30) as s:
        yield s


def _get(server: Loopback, url: str, dest: Path, **kw):
    assert url.startswith("http://127.0.0.1:")  # never the internet
    waits: list[float] = []
    kw.setdefault("sleep", waits.append)
    kw.setdefault("timeout", (2, 2))
    return download(url, dest, **kw), waits


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_download_lands_whole_and_checked(server, tmp_path):
    url = server.serve("pacs.zip", BODY)
    md5 = hashlib.md5(BODY).hexdigest()
    path, waits = _get(server, url, tmp_path / "pacs.zip", size=len(BODY), sha256=SHA, md5=md5)
    assert path.read_bytes() == BODY and waits == [] and _siblings(tmp_path) == ["pacs.zip"]
    assert sha256_file(path) == SHA and md5_file(path) == md5
    # already there and matching: returned at once, no request
    assert download(url, path, sha256=SHA) == path and len(server.requests("pacs.zip")) == 1


def test_a_wrong_checksum_is_refused_naming_both_values_and_kept_aside(server, tmp_path):
    url = server.serve("pacs.zip", BODY[:-1] + b"\x00")
    with pytest.raises(ChecksumError) as info:
        _get(server, url, tmp_path / "pacs.zip", sha256=SHA)
    got = hashlib.sha256(BODY[:-1] + b"\x00").hexdigest()
    message = str(info.value)
    assert SHA in message and got in message and "\n" not in message and "pacs.zip.bad" in message
    assert _siblings(tmp_path) == ["pacs.zip.bad"] and info.value.kept == tmp_path / "pacs.zip.bad"
    assert isinstance(info.value, SourceError)  # a caller tries its next source


def test_a_wrong_md5_is_refused(server, tmp_path):
    url = server.serve("a.tar.gz", BODY)
    with pytest.raises(ChecksumError, match="md5"):
        _get(server, url, tmp_path / "a.tar.gz", md5="0" * 32)
    assert not (tmp_path / "a.tar.gz").exists()


def test_a_truncated_body_is_resumed_with_range(server, tmp_path):
    url = server.serve("pacs.zip", BODY, Fault(truncate_at=300_000))
    path, waits = _get(server, url, tmp_path / "pacs.zip", size=len(BODY), sha256=SHA)
    assert path.read_bytes() == BODY and waits == [1.0]
    assert [r for _, _, r in server.requests("pacs.zip")] == [None, "bytes=300000-"]


def test_a_server_without_range_restarts_cleanly_from_byte_0(server, tmp_path):
    url = server.serve("pacs.zip", BODY, Fault(truncate_at=200_000, no_range=True))
    path, _ = _get(server, url, tmp_path / "pacs.zip", size=len(BODY), sha256=SHA)
    assert path.read_bytes() == BODY  # not the first 200 kB twice
    assert [r for _, _, r in server.requests("pacs.zip")] == [None, "bytes=200000-"]


def test_5xx_then_200_is_retried_with_capped_exponential_backoff(server, tmp_path):
    url = server.serve("pacs.zip", BODY, Fault(errors=3, error_status=503))
    path, waits = _get(server, url, tmp_path / "pacs.zip", sha256=SHA)
    assert path.read_bytes() == BODY and waits == [1.0, 2.0, 4.0]
    assert fetch.backoff(10) == fetch.BACKOFF_CAP


def test_retries_are_bounded_and_the_error_says_how_to_continue(server, tmp_path):
    url = server.serve("pacs.zip", BODY, Fault(errors=100, error_status=500))
    with pytest.raises(SourceError, match="gave up after 3 failed tries") as info:
        _get(server, url, tmp_path / "pacs.zip", retries=2)
    assert info.value.status == 500 and len(server.requests("pacs.zip")) == 3
    assert not (tmp_path / "pacs.zip").exists()


@pytest.mark.parametrize("status", [404, 410, 403])
def test_missing_or_forbidden_is_not_retried(server, tmp_path, status):
    url = server.serve("pacs.zip", BODY, Fault(status=status))
    with pytest.raises(SourceError, match=f"HTTP {status}") as info:
        _get(server, url, tmp_path / "pacs.zip")
    assert info.value.status == status and len(server.requests("pacs.zip")) == 1
    assert "\n" not in str(info.value) and not (tmp_path / "pacs.zip").exists()


def test_redirects_are_followed_and_bounded(server, tmp_path):
    url = server.serve("moved.zip", b"", Fault(redirect_to="/pacs.zip"))
    server.serve("pacs.zip", BODY)
    assert _get(server, url, tmp_path / "a.zip", sha256=SHA)[0].read_bytes() == BODY
    loop = server.serve("loop.zip", BODY, Fault(redirects=1000))
    with pytest.raises(SourceError, match="HTTP 302") as info:
        _get(server, loop, tmp_path / "b.zip")
    assert len(server.requests("loop.zip")) <= fetch.MAX_REDIRECTS + 1 and info.value.status == 302


def test_a_stalled_connection_times_out_and_resumes(server, tmp_path):
    url = server.serve("pacs.zip", BODY, Fault(stall_at=400_000, stall=3.0))
    path, waits = _get(server, url, tmp_path / "pacs.zip", sha256=SHA, timeout=(1, 0.5))
    ranges = [r for _, _, r in server.requests("pacs.zip")]
    # (a loaded machine may time out more than once: every retry resumes, none starts again from byte 0)
    assert path.read_bytes() == BODY and len(waits) >= 1 and ranges[0] is None
    assert "bytes=400000-" in ranges and all(r is not None for r in ranges[1:])


def test_a_size_the_server_contradicts_is_refused_before_writing(server, tmp_path):
    url = server.serve("pacs.zip", BODY)
    with pytest.raises(SourceError, match="offers 1048576 bytes, the source declares 5"):
        _get(server, url, tmp_path / "pacs.zip", size=5)
    assert not (tmp_path / "pacs.zip").exists()


def test_short_disk_space_is_refused_before_anything_is_written(server, tmp_path, monkeypatch):
    url = server.serve("pacs.zip", BODY)
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda p: type("Usage", (), {"free": 1000})())
    with pytest.raises(DiskFullError, match="not enough free space .* 1.0 MiB needed, 1000 bytes free"):
        _get(server, url, tmp_path / "pacs.zip", size=len(BODY))
    assert server.requests("pacs.zip") == [] and _siblings(tmp_path) == []


def test_a_full_disk_during_the_write_is_one_line_and_the_part_continues(server, tmp_path, monkeypatch):
    url = server.serve("pacs.zip", BODY)
    real = fetch._append

    def full(f, block):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch, "_append", full)
    with pytest.raises(DiskFullError, match="disk full while writing .*pacs.zip.part"):
        _get(server, url, tmp_path / "pacs.zip", sha256=SHA)
    monkeypatch.setattr(fetch, "_append", real)
    assert _get(server, url, tmp_path / "pacs.zip", sha256=SHA)[0].read_bytes() == BODY


def test_drive_quota_page_says_retry_later_or_archive(server, tmp_path, monkeypatch):
    url = server.serve("uc", BODY, Fault(html=True))
    monkeypatch.setattr(fetch, "_is_drive", lambda u: True)
    with pytest.raises(SourceError, match="retry later or use --archive") as info:
        _get(server, url, tmp_path / "pacs.zip")
    assert info.value.status == 403


class Killed(BaseException):
    """Stands for SIGKILL: nothing handles it."""


def test_an_exception_at_a_write_point_leaves_a_part_that_the_rerun_continues(server, tmp_path, monkeypatch):
    url = server.serve("pacs.zip", BODY)
    real, writes = fetch._append, []

    def dies(f, block):
        if writes:
            raise Killed
        writes.append(len(block))
        real(f, block)

    monkeypatch.setattr(fetch, "_append", dies)
    with pytest.raises(Killed):
        _get(server, url, tmp_path / "pacs.zip", sha256=SHA)
    assert _siblings(tmp_path) == ["pacs.zip.part"] and (tmp_path / "pacs.zip.part").stat().st_size == writes[0]
    monkeypatch.setattr(fetch, "_append", real)
    assert _get(server, url, tmp_path / "pacs.zip", sha256=SHA)[0].read_bytes() == BODY
    assert server.requests("pacs.zip")[-1][2] == f"bytes={writes[0]}-" and _siblings(tmp_path) == ["pacs.zip"]


def test_sigkill_mid_download_then_the_same_call_continues(server, tmp_path):
    url = server.serve("pacs.zip", BODY, Fault(stall_at=500_000, stall=5.0))
    dest = tmp_path / "pacs.zip"
    # the module alone (torch-free), not the dgmoe.data package, whose import takes seconds
    code = ("import importlib.util, pathlib\n"
            f"spec = importlib.util.spec_from_file_location('fetch', {str(SRC / 'dgmoe' / 'data' / 'fetch.py')!r})\n"
            "fetch = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(fetch)\n"
            f"fetch.download({url!r}, pathlib.Path({str(dest)!r}))\n")
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(SRC)})
    part = tmp_path / "pacs.zip.part"
    deadline = time.monotonic() + 60  # (left as soon as the bytes before the stall are written)
    while time.monotonic() < deadline and not (part.exists() and part.stat().st_size >= 500_000):
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(5)
    assert part.stat().st_size == 500_000 and not dest.exists()
    assert _get(server, url, dest, sha256=SHA)[0].read_bytes() == BODY
    assert server.requests("pacs.zip")[-1][2] == "bytes=500000-" and _siblings(tmp_path) == ["pacs.zip"]


def test_an_existing_destination_that_differs_is_kept_aside_and_fetched_again(server, tmp_path, capsys):
    url = server.serve("pacs.zip", BODY)
    (tmp_path / "pacs.zip").write_bytes(b"old")
    assert _get(server, url, tmp_path / "pacs.zip", sha256=SHA)[0].read_bytes() == BODY
    assert (tmp_path / "pacs.zip.bad").read_bytes() == b"old" and "kept aside" in capsys.readouterr().err


def test_only_http_addresses(tmp_path):
    with pytest.raises(Exception, match="only http:// and https://"):
        download("file:///etc/passwd", tmp_path / "x")


@pytest.mark.parametrize("declared", [True, False], ids=["size-declared", "size-unknown"])
def test_a_kill_just_before_the_rename_is_finished_by_the_rerun_without_fetching_again(server, tmp_path, monkeypatch,
                                                                                       declared):
    url = server.serve("pacs.zip", BODY)
    real = fetch.os.replace

    def dies(*args):
        raise Killed

    monkeypatch.setattr(fetch.os, "replace", dies)
    size = len(BODY) if declared else None
    with pytest.raises(Killed):
        _get(server, url, tmp_path / "pacs.zip", size=size, sha256=SHA)
    assert _siblings(tmp_path) == ["pacs.zip.part"] and (tmp_path / "pacs.zip.part").stat().st_size == len(BODY)
    monkeypatch.setattr(fetch.os, "replace", real)
    assert _get(server, url, tmp_path / "pacs.zip", size=size, sha256=SHA)[0].read_bytes() == BODY
    # declared size: the whole .part is checked without a request; unknown: the server answers 416, nothing more
    assert [r for _, _, r in server.requests("pacs.zip")] == [None] + ([] if declared else [f"bytes={len(BODY)}-"])


def test_a_bar_with_bytes_rate_and_eta_on_request_and_none_without_a_terminal(server, tmp_path, capsys):
    url = server.serve("pacs.zip", BODY)
    _get(server, url, tmp_path / "a.zip", progress=True)
    err = capsys.readouterr().err
    assert "a.zip" in err and "/1.00M [" in err and "B/s]" in err  # name, bytes of the total, elapsed<ETA, rate
    _get(server, url, tmp_path / "b.zip")  # progress=None and stderr is not a terminal under pytest
    assert capsys.readouterr().err == ""


def test_two_processes_never_write_one_part(server, tmp_path):
    url = server.serve("pacs.zip", BODY)
    with open(tmp_path / "pacs.zip.part", "ab") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UsageError, match="being written by another process"):
            _get(server, url, tmp_path / "pacs.zip")
    assert server.requests("pacs.zip") == []


def test_the_module_imports_neither_torch_nor_an_optional_package():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('fetch', {str(SRC / 'dgmoe' / 'data' / 'fetch.py')!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "print(sorted(m for m in ('torch', 'requests', 'gdown', 'huggingface_hub', 'tqdm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_an_untrusted_certificate_is_not_retried(tmp_path, monkeypatch):
    import ssl
    import urllib.error

    def untrusted(request, timeout):
        raise urllib.error.URLError(ssl.SSLCertVerificationError(1, "certificate verify failed"))

    monkeypatch.setattr(fetch._OPENER, "open", untrusted)
    waits: list[float] = []
    with pytest.raises(SourceError, match="TLS certificate is not trusted"):
        download("https://127.0.0.1:9/a.zip", tmp_path / "a.zip", sleep=waits.append)
    assert waits == []


def test_the_server_serves_a_dict_and_stops_by_itself(tmp_path):
    with Loopback({"a/b.bin": b"abc"}, lifetime=3) as server:
        assert _get(server, server.url("a/b.bin"), tmp_path / "b.bin")[0].read_bytes() == b"abc"
        deadline = time.monotonic() + 60
        while not server._stop.is_set() and time.monotonic() < deadline:  # (stopped by its own timer)
            time.sleep(0.05)
        with pytest.raises(SourceError, match="gave up"):  # nobody listens any more
            _get(server, server.url("a/b.bin"), tmp_path / "c.bin", retries=0, timeout=(0.5, 0.5))
