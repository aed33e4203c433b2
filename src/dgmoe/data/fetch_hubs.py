"""Downloads from Google Drive (through `gdown`) and from the Hugging Face Hub (through `huggingface_hub`), ending
as `dgmoe.data.fetch.download` does: the bytes checked against the published checksum, then renamed into place;
a mismatch is kept aside as `<dest>.bad` and refused naming expected and got.

Each library writes (and resumes) in a hidden staging folder beside the destination, `.<name>.gdrive` or
`.<name>.hub`, which no data command takes for data; the staging folder is removed once the file is in place.
Neither library is a dependency: a missing one is one line naming its extra (`pip install 'dgmoe[gdrive]'`,
`'dgmoe[hub]'`). A refusal by the source raises `SourceError` with its HTTP status where one is known (Drive's
403 or quota page says to retry later or use `--archive`), so that a caller tries its next source.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import time
from pathlib import Path

from dgmoe.data.fetch import (
    DRIVE_HINT,
    ChecksumError,
    SourceError,
    finish,
    keep_aside,
    mismatch,
)
from dgmoe.errors import DiskFullError, UsageError

_SHA256 = re.compile(r"[0-9a-f]{64}")
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}")


def git_blob_sha1(path: Path) -> str:
    """The git object id of the file `path` (sha1 of "blob <size>\\0" and its bytes): the ETag the Hub gives for
    a file kept in git rather than LFS."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _staging(dest: Path, kind: str) -> Path:
    folder = dest.parent / f".{dest.name}.{kind}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _already(dest: Path, kind: str, size: int | None, md5: str | None, sha256: str | None) -> bool:
    """True when `dest` is there and matches what is published (with nothing published: when it is there); its
    staging folder, which a kill just after the rename leaves, is then removed."""
    if dest.is_file() and mismatch(dest, size=size, md5=md5, sha256=sha256) is None:
        shutil.rmtree(dest.parent / f".{dest.name}.{kind}", ignore_errors=True)
        return True
    return False


def _status(error: BaseException) -> int | None:
    status = getattr(getattr(error, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _disk_full(error: BaseException, dest: Path) -> None:
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        raise DiskFullError(errno.ENOSPC, f"disk full while downloading {dest}; free some space and re-run: the "
                                          "download continues from there") from None


def download_drive(file_id: str, dest: Path, *, size: int | None = None, md5: str | None = None,
                   sha256: str | None = None, progress: bool | None = None) -> Path:
    """Download the Google Drive file `file_id` to `dest` with gdown (resumable), check it, rename it into place
    and return `dest`. A refusal by Drive (403, a quota or permission page) raises `SourceError` (status 403)
    saying to retry later or use --archive; a missing gdown is one line naming the `gdrive` extra."""
    dest = Path(dest)
    if _already(dest, "gdrive", size, md5, sha256):
        return dest
    try:
        import gdown
    except ImportError:
        raise UsageError("Google Drive sources need the gdown package: pip install 'dgmoe[gdrive]' (or download "
                         "the file yourself and pass it with --archive FILE)") from None
    url = f"https://drive.google.com/uc?id={file_id}"
    staging = _staging(dest, "gdrive")
    out = staging / dest.name
    quiet = not (progress if progress is not None else os.isatty(2))
    try:
        got = gdown.download(id=file_id, output=str(out), quiet=quiet, resume=True)
    except Exception as e:  # gdown's own errors, requests' HTTP and connection errors
        _disk_full(e, dest)
        status = _status(e)
        if type(e).__name__ == "FileURLRetrievalError" or status in (403, 429):
            raise SourceError(f"{url}: {DRIVE_HINT} ({_first_line(e)})", url=url, status=403) from None
        if status is None and not isinstance(e, OSError):
            raise
        raise SourceError(f"{url}: {_first_line(e)}", url=url, status=status) from None
    if got is None or not out.is_file():  # gdown before raising errors returned None on a refusal
        raise SourceError(f"{url}: {DRIVE_HINT}", url=url, status=403)
    finish(out, dest, url=url, size=size, md5=md5, sha256=sha256)
    shutil.rmtree(staging, ignore_errors=True)
    return dest


#: attempts at a Hub file whose transfer broke off (huggingface_hub resumes its `.incomplete` file each time)
HUB_ATTEMPTS = 4
#: the HTTP clients huggingface_hub versions use: their transport errors (a body cut short, a reset) are retried
_CLIENTS = ("httpx", "httpcore", "h11", "requests", "urllib3")


def _broke_off(error: BaseException) -> bool:
    """A transfer that broke off (retried), not an answer of the Hub's (a status, a refusal: not retried)."""
    if _status(error) is not None:
        return False
    return isinstance(error, (ConnectionError, TimeoutError)) or type(error).__module__.split(".")[0] in _CLIENTS


def _hub_file(hub, repo_id: str, filename: str, revision: str, repo_type: str, staging: Path,
              endpoint: str | None, token: str | bool | None, show: bool, sleep=time.sleep) -> Path:
    """The file huggingface_hub downloaded into `staging` (a link into its cache, as old versions make, resolved);
    a transfer that broke off is resumed, up to `HUB_ATTEMPTS` times, whichever HTTP client the installed
    huggingface_hub uses."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    if not show:
        disable_progress_bars()
    try:
        for attempt in range(HUB_ATTEMPTS):
            try:
                path = hub.hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision,
                                           local_dir=staging, cache_dir=staging / ".cache", endpoint=endpoint,
                                           token=token)
                break
            except Exception as e:  # noqa: BLE001 -- sorted by `_broke_off`; anything else goes on as it was
                if not _broke_off(e) or attempt == HUB_ATTEMPTS - 1:
                    raise OSError(f"{type(e).__name__}: {_first_line(e)}") if _broke_off(e) else e
                sleep(min(0.5 * 2**attempt, 4.0))
    finally:
        if not show and not was_disabled:
            enable_progress_bars()
    return Path(path).resolve()


def download_hub(repo_id: str, filename: str, revision: str, dest: Path, repo_type: str = "dataset",
                 sha256: str | None = None, *, size: int | None = None, progress: bool | None = None,
                 endpoint: str | None = None, token: str | bool | None = None) -> Path:
    """Download `filename` of the Hub repo `repo_id` at `revision` to `dest` with huggingface_hub (resumable), check
    its sha256, rename it into place and return `dest`. The sha256 checked is `sha256` where given, else the LFS
    object's own (the ETag the Hub gives for an LFS file); a declared `sha256` that differs from the Hub's LFS ETag
    is refused before anything is downloaded. `endpoint`: the Hub's address (default: HF_ENDPOINT, read now, else
    huggingface_hub's default); `repo_type`: "dataset" or "model"."""
    dest = Path(dest)
    if repo_type not in ("dataset", "model"):
        raise UsageError(f"repo_type {repo_type!r}: expected 'dataset' or 'model'")
    if _already(dest, "hub", size, None, sha256):
        return dest
    try:
        import huggingface_hub as hub
    except ImportError:
        raise UsageError("Hugging Face Hub sources need the huggingface_hub package: pip install 'dgmoe[hub]'"
                         ) from None
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    url = hub.hf_hub_url(repo_id, filename, repo_type=repo_type, revision=revision, endpoint=endpoint)
    where = f"{repo_type} {repo_id}@{revision}: {filename} ({url})"
    show = progress if progress is not None else os.isatty(2)
    try:
        meta = hub.get_hf_file_metadata(url, token=token)
        etag = (meta.etag or "").strip('"').removeprefix("W/").strip('"').lower()
        lfs = etag if _SHA256.fullmatch(etag) else None
        if sha256 and lfs and lfs != sha256.lower():
            raise ChecksumError(f"{where}: the Hub's file has sha256 {lfs}, expected {sha256.lower()} (the declared "
                                "value); not downloaded", url=url, expected=sha256.lower(), got=lfs)
        if size is not None and meta.size is not None and meta.size != size:
            raise SourceError(f"{where}: the Hub offers {meta.size} bytes, the source declares {size}; not the "
                              "declared file", url=url)
        path = _hub_file(hub, repo_id, filename, revision, repo_type, _staging(dest, "hub"), endpoint, token, show)
    except (OSError, ValueError) as e:  # huggingface_hub's HTTP errors are OSErrors, its validation ValueErrors
        _disk_full(e, dest)
        status = _status(e)
        raise SourceError(f"{where}: {type(e).__name__}: {_first_line(e)}", url=url, status=status) from None
    staging = dest.parent / f".{dest.name}.hub"
    try:
        if not sha256 and not lfs and _GIT_SHA1.fullmatch(etag) and git_blob_sha1(path) != etag:
            got, bad = git_blob_sha1(path), keep_aside(path, dest)
            raise ChecksumError(f"{where}: the file's git object id is {got}, expected {etag} (the Hub's ETag); the "
                                f"bytes are kept aside as {bad} and not used", url=url, expected=etag, got=got,
                                kept=bad)
        finish(path, dest, url=url, size=size, sha256=(sha256 or lfs))
    except ChecksumError:  # the bytes are kept aside: huggingface_hub's bookkeeping of them goes
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return dest
