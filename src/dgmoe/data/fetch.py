"""Downloads a person can trust: resumable, bounded in time, checked against the published checksum, atomic.

`download(url, dest, size=..., sha256=...)` writes the body into `<dest>.part` (held under an exclusive lock, so
two processes never write one file), resumes it with an HTTP Range request after a broken connection or a kill (a
server without Range support answers 200 and the file restarts cleanly from byte 0), and renames it to `dest`
only once the whole body arrived and its size and published checksum match. A mismatch keeps the bytes aside as
`<dest>.bad` (for inspection; nothing reads it) and raises `ChecksumError` naming expected and got. Connection
errors, timeouts, 5xx answers and truncated bodies are retried with capped exponential backoff; 401/403/404/410
are not and raise `SourceError` (with `.status`) so that a caller tries its next source. Free disk space is
checked before the first byte is written, a full disk during the write is one line, and a tqdm bar with bytes,
rate and ETA shows on a terminal only.

Google Drive (`download_drive`, through the optional `gdown`: `pip install 'dgmoe[gdrive]'`) and the Hugging
Face Hub (`download_hub`, through `huggingface_hub`: the `hub` extra) live in `dgmoe.data.fetch_hubs` and end the
same way: checked, then renamed into place. This module imports neither torch nor any optional package.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import http.client
import os
import re
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Callable
from urllib.parse import urlsplit

from dgmoe.errors import DgmoeError, DiskFullError, UsageError

CHUNK = 1 << 20
#: redirects followed at most (a loop or a longer chain is refused as the source's failure)
MAX_REDIRECTS = 10
#: the backoff before retry k (1, 2, ...) is min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (k - 1)) seconds
BACKOFF_BASE, BACKOFF_CAP = 1.0, 30.0
#: a failed attempt that brought at least this many bytes does not count against `retries` (a long download over a
#: flaky link keeps going as long as it progresses)
PROGRESS_RESET = 1 << 20
#: statuses that say the file is not (or not for us) at this source: the caller tries the next one
NOT_THERE = (401, 403, 404, 410)
DRIVE_HOSTS = ("drive.google.com", "drive.usercontent.google.com", "docs.google.com")
DRIVE_HINT = "Google Drive refuses the download for now (quota or permission): retry later or use --archive FILE"


class SourceError(DgmoeError):
    """A source that did not give the file: `.status` is the HTTP status it answered (None when the connection
    itself failed or the body was wrong), `.url` its address. A caller with more sources tries the next one."""

    def __init__(self, message: str, *, url: str = "", status: int | None = None):
        super().__init__(message)
        self.url, self.status = url, status


class ChecksumError(SourceError):
    """The whole body arrived but is not the published file: `.expected`, `.got`, and `.kept`, the path of the
    bytes kept aside for inspection (never used)."""

    def __init__(self, message: str, *, url: str = "", expected: str = "", got: str = "", kept: Path | None = None):
        super().__init__(message, url=url)
        self.expected, self.got, self.kept = expected, got, kept


class _Retry(Exception):
    """One attempt failed in a way that another attempt may not: a connection error, a timeout, 5xx, a short body."""

    def __init__(self, reason: str, status: int | None = None, after: float | None = None, restart: bool = False):
        super().__init__(reason)
        self.status, self.after, self.restart = status, after, restart


def _hash_file(path: Path, names: tuple[str, ...]) -> dict[str, str]:
    hashes = {name: hashlib.new(name) for name in names}
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            for h in hashes.values():
                h.update(block)
    return {name: h.hexdigest() for name, h in hashes.items()}


def sha256_file(path: str | Path) -> str:
    """The sha256 of the file `path` (hex), read in 1 MiB blocks."""
    return _hash_file(Path(path), ("sha256",))["sha256"]


def md5_file(path: str | Path) -> str:
    """The md5 of the file `path` (hex), read in 1 MiB blocks (md5 only because sources publish it)."""
    return _hash_file(Path(path), ("md5",))["md5"]


def mismatch(path: Path, *, size: int | None = None, md5: str | None = None,
             sha256: str | None = None) -> tuple[str, str, str] | None:
    """(what, expected, got) of the first of size, md5, sha256 (those given) in which the file `path` differs from
    the published one; None when it matches them all (or none is given)."""
    got_size = path.stat().st_size
    if size is not None and got_size != size:
        return "size", f"{size} bytes", f"{got_size} bytes"
    wanted = {name: value.lower() for name, value in (("md5", md5), ("sha256", sha256)) if value}
    got = _hash_file(path, tuple(wanted)) if wanted else {}
    for name, value in wanted.items():
        if got[name] != value:
            return name, value, got[name]
    return None


def keep_aside(path: Path, dest: Path) -> Path:
    """Move the file `path` to `<dest>.bad` (replacing an older one): bytes kept for inspection, never used."""
    bad = dest.with_name(dest.name + ".bad")
    os.replace(path, bad)
    return bad


def finish(part: Path, dest: Path, *, url: str, size: int | None = None, md5: str | None = None,
           sha256: str | None = None) -> Path:
    """Check the complete file `part` against the published size and checksums, then rename it to `dest`; on a
    mismatch keep it aside (`keep_aside`) and raise `ChecksumError` naming expected and got."""
    wrong = mismatch(part, size=size, md5=md5, sha256=sha256)
    if wrong is not None:
        what, expected, got = wrong
        bad = keep_aside(part, dest)
        raise ChecksumError(f"{url}: the {what} of {dest.name} is {got}, expected {expected} (the published value); "
                            f"the bytes are kept aside as {bad} and not used", url=url, expected=expected, got=got,
                            kept=bad)
    with open(part, "rb") as f:
        os.fsync(f.fileno())
    os.replace(part, dest)
    return dest


def check_space(folder: Path, needed: int, what: str) -> None:
    """Refuse in one line, before anything is written, when `folder`'s file system has less than `needed` bytes."""
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise DiskFullError(errno.ENOSPC, f"not enough free space in {folder} for {what}: {_human(needed)} needed, "
                                          f"{_human(free)} free; free some space and re-run")


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


def progress_bar(total: int | None, initial: int, name: str, show: bool | None):
    """A tqdm bar of bytes (rate and ETA) on stderr when it is a terminal (`show=None`), or as `show` says."""
    from tqdm import tqdm

    show = sys.stderr.isatty() if show is None else show
    return tqdm(total=total, initial=initial, desc=name, unit="B", unit_scale=True, unit_divisor=1024,
                disable=not show, file=sys.stderr, leave=False, dynamic_ncols=True)


def backoff(failures: int, after: float | None = None) -> float:
    """Seconds to wait before the next try after `failures` failed ones (a server's Retry-After, capped, wins)."""
    if after is not None:
        return min(BACKOFF_CAP, max(0.0, after))
    return min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (failures - 1))


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS


_OPENER = urllib.request.build_opener(_Redirects)


def _is_drive(url: str) -> bool:
    return (urlsplit(url).hostname or "") in DRIVE_HOSTS


def _retry_after(headers) -> float | None:
    value = (headers or {}).get("Retry-After", "") if headers is not None else ""
    return float(value) if str(value).strip().isdigit() else None


def _set_read_timeout(response, seconds: float) -> None:
    """The connect timeout bounded the connection; each read of the body is bounded by `seconds`."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(seconds)


def _append(f: IO[bytes], block: bytes) -> None:
    """Write one block of the body at the end of the .part file (the one place the body reaches the disk; the file
    is unbuffered, so what a SIGKILL interrupts is only ever a shorter .part)."""
    view = memoryview(block)
    while view:
        view = view[f.write(view):]


def _open(url: str, have: int, timeout: float, headers: dict[str, str]):
    """The response to GET `url` from byte `have`, or raise `_Retry` / `SourceError`; None: the .part is whole."""
    from dgmoe import __version__

    request = urllib.request.Request(url, headers={"User-Agent": f"dgmoe/{__version__}", "Accept-Encoding": "identity",
                                                   **({"Range": f"bytes={have}-"} if have else {}), **headers})
    try:
        return _OPENER.open(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        status, reason = e.code, e.reason
        e.close()
        if status == 416 and have:  # the range starts at or past the end: whole already, or the file changed
            total = re.fullmatch(r"bytes \*/(\d+)", e.headers.get("Content-Range", "") or "")
            if total and int(total.group(1)) == have:
                return None
            raise _Retry("the server refused to resume (416); restarting from byte 0", status, restart=True) from None
        if status in NOT_THERE or (400 <= status < 500 and status not in (408, 429)) or 300 <= status < 400:
            hint = f"; {DRIVE_HINT}" if status == 403 and _is_drive(url) else ""
            raise SourceError(f"{url}: HTTP {status} {reason}{hint}", url=url, status=status) from None
        raise _Retry(f"HTTP {status} {reason}", status, _retry_after(e.headers)) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        cause = getattr(e, "reason", None) or e
        if isinstance(cause, ssl.SSLCertVerificationError):  # another try gets the same certificate
            raise SourceError(f"{url}: the server's TLS certificate is not trusted ({cause})", url=url) from None
        raise _Retry(f"{cause}") from None


def _body_range(response, have: int) -> tuple[int, int | None]:
    """(first byte, total size or None) of the body `response` brings."""
    length = response.headers.get("Content-Length")
    if response.status == 206:
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", response.headers.get("Content-Range", "") or "")
        if not match:
            raise _Retry("the server answered 206 without a Content-Range; restarting from byte 0", 206, restart=True)
        start, total = int(match.group(1)), match.group(3)
        return start, int(total) if total != "*" else None
    return 0, int(length) if length and length.isdigit() else None


def _attempt(url: str, f: IO[bytes], part: Path, size: int | None, timeout: tuple[float, float],
             show: bool | None, headers: dict[str, str]) -> None:
    """One GET of `url` from the end of the .part file `f`; raises `_Retry` when another attempt may do better."""
    have = os.fstat(f.fileno()).st_size
    response = _open(url, have, timeout[0], headers)
    if response is None:
        return
    with response:
        _set_read_timeout(response, timeout[1])
        start, total = _body_range(response, have)
        if response.status == 206 and start != have:
            raise _Retry(f"the server sent bytes from {start}, not {have}; restarting from byte 0", 206, restart=True)
        if response.status != 206:  # no Range support (200 with the whole body): restart cleanly from byte 0
            f.truncate(0)
            have = 0
        if _is_drive(url) and "text/html" in (response.headers.get("Content-Type") or ""):
            raise SourceError(f"{url}: Google Drive answered with a web page, not the file; {DRIVE_HINT}", url=url,
                              status=403)
        if size is not None and total is not None and total != size:
            raise SourceError(f"{url}: the server offers {total} bytes, the source declares {size}; not the "
                              "published file", url=url)
        if total is not None:
            check_space(part.parent, total - have, part.name)
        with progress_bar(total, have, part.name.removesuffix(".part"), show) as bar:
            while True:
                try:
                    block = response.read1(CHUNK)  # what has arrived, at once: a stall keeps nothing in memory
                except (http.client.HTTPException, OSError) as e:
                    raise _Retry(f"the connection broke after {have} bytes ({e or type(e).__name__})") from None
                if not block:
                    break
                try:
                    _append(f, block)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise DiskFullError(errno.ENOSPC, f"disk full while writing {part}; free some space and "
                                                          "re-run: the download continues from there") from None
                    raise
                have += len(block)
                bar.update(len(block))
        if total is not None and have < total:
            raise _Retry(f"the body ended after {have} of {total} bytes")


def download(url: str, dest: Path, *, size: int | None = None, md5: str | None = None, sha256: str | None = None,
             progress: bool | None = None, timeout: tuple[float, float] = (10, 60), retries: int = 4,
             sleep: Callable[[float], None] = time.sleep, headers: dict[str, str] | None = None) -> Path:
    """Download `url` to `dest` (see the module docstring) and return `dest`; a `dest` already there that matches
    the published size and checksums is returned at once. `size`, `md5`, `sha256`: the published values (those
    known); `progress`: a bar (None: on a terminal only); `timeout`: (connect, read) seconds; `retries`: failed
    attempts tolerated in a row; `sleep`: how to wait between them (tests pass a recorder); `headers`: sent with
    every request. A `.part` left by an earlier call is continued whichever URL this call names (a mirror of the
    same file): the checksum is what proves the result, so give one whenever the source publishes one. Proxies
    are taken from the environment (http_proxy, https_proxy, no_proxy), as urllib does."""
    dest = Path(dest)
    if urlsplit(url).scheme not in ("http", "https"):
        raise UsageError(f"{url}: only http:// and https:// addresses can be downloaded (a file you have: --archive)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        wrong = mismatch(dest, size=size, md5=md5, sha256=sha256)
        if wrong is None:
            return dest
        bad = keep_aside(dest, dest)
        print(f"dgmoe: warning: {dest} is not the published file (its {wrong[0]} is {wrong[2]}, expected "
              f"{wrong[1]}); kept aside as {bad}, downloading it again", file=sys.stderr)
    part = dest.with_name(dest.name + ".part")
    if size is not None:  # before anything is written, the .part included
        have = part.stat().st_size if part.is_file() else 0
        check_space(dest.parent, size - have if have <= size else size, dest.name)
    with open(part, "ab", buffering=0) as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{part} is being written by another process; wait for it to finish") from None
        if size is not None and os.fstat(f.fileno()).st_size > size:
            f.truncate(0)
        failures = 0
        while size is None or os.fstat(f.fileno()).st_size != size:
            before = os.fstat(f.fileno()).st_size
            try:
                _attempt(url, f, part, size, timeout, progress, dict(headers or {}))
                break
            except _Retry as e:
                if e.restart:
                    f.truncate(0)
                failures = 1 if os.fstat(f.fileno()).st_size - before >= PROGRESS_RESET else failures + 1
                if failures > retries:
                    raise SourceError(f"{url}: gave up after {failures} failed tries in a row ({e}); the "
                                      f"{os.fstat(f.fileno()).st_size} bytes received are kept in {part} and a re-run "
                                      "continues from there", url=url, status=e.status) from None
                sleep(backoff(failures, e.after))
        return finish(part, dest, url=url, size=size, md5=md5, sha256=sha256)
