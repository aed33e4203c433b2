"""Atomic file writes: a reader (or a crash) never sees a half-written file.

Every file dgmoe writes goes through `atomic_path` (or `write_bytes_atomic` and the helpers built on it): a
temporary file `.<name>.<random>.tmp` in the same folder, flushed, fsynced and renamed over the target
(`os.replace` is atomic on POSIX). The file gets the mode a plain `open()` would give it (0666 minus the umask),
so teammates on shared storage can read results. A full disk raises `DiskFullError` naming the file; a process
killed mid-write leaves only a temporary file, which `remove_stale_temporaries` deletes (the run folder's lock
makes that safe). No library writes a file of its own: safetensors' `save_file` writes through a temporary
`.tmpXXXXXX` of its own, which a kill leaves behind under a name dgmoe's cleanup would not know, so weights are
serialised to bytes (`save_safetensors_atomic`) and written here; the cleanup also removes such files that an
earlier dgmoe, which let safetensors write, left. What grows line by line (a run's train.log, a job's
stdout.log and stderr.log, TensorBoard's event files) and lock files are appended or written in place: a kill
leaves them as far as they got, never a temporary file.

A folder of files that belong together (a soup's run folder, a leaderboard method's predictions) is written the
same way, whole: into a hidden temporary folder `.<name>.<pid>.partial` that then takes the folder's place
(`atomic_folder`); a killed writer leaves only such folders, which `remove_stale_folders` deletes on the next run.

JSON files are strict JSON (RFC 8259, which has no NaN or Infinity): a value that is not a finite number is
written as `null`, "no value", which strict readers (jq, JavaScript, `json.loads(..., parse_constant=...)`)
accept and `pandas` reads as missing.
"""
from __future__ import annotations

import errno
import glob
import json
import math
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from dgmoe.errors import DiskFullError, UsageError

TEMP_GLOB = ".*.tmp"
#: the temporary file safetensors' own `save_file` writes beside its target (`.tmp` and six random characters)
SAFETENSORS_TEMP = re.compile(r"\.tmp[A-Za-z0-9]{6}")
FOLDER_SUFFIX = ".partial"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def file_mode() -> int:
    """0666 minus the process umask (read without changing it, via /proc where available)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _is_disk_full(error: BaseException, folder: Path) -> bool:
    if isinstance(error, OSError) and error.errno in _NO_SPACE:
        return True
    # torch.save reports a failed write as RuntimeError("... PytorchStreamWriter failed writing ...")
    if isinstance(error, RuntimeError) and ("PytorchStreamWriter" in str(error) or "inline_container" in str(error)):
        try:
            return shutil.disk_usage(folder).free < 64 * 2**20
        except OSError:
            return False
    return False


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it replaces `path`, on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if _is_disk_full(error, path.parent):
            raise DiskFullError(errno.ENOSPC, f"disk full while writing {path}") from error
        raise


def stale_temporaries(folder: str | Path, names: tuple[str, ...] | None = None) -> list[Path]:
    """The temporary files a killed writer would leave in `folder`: `atomic_path`'s, and safetensors' own; with
    `names` (in a folder dgmoe does not own), only `atomic_path`'s for the files of those names."""
    folder = Path(folder)
    if names is not None:
        found = {p for name in names for p in folder.glob(f".{glob.escape(name)}.*.tmp")}
    else:
        found = set(folder.glob(TEMP_GLOB)) | {p for p in folder.glob(".tmp*") if SAFETENSORS_TEMP.fullmatch(p.name)}
    return sorted(p for p in found if p.is_file())


def remove_stale_temporaries(folder: str | Path, names: tuple[str, ...] | None = None) -> list[Path]:
    """Delete the temporary files that killed writers left in `folder` (call only while holding its lock, or
    while no other process writes the files `names`)."""
    removed = stale_temporaries(folder, names)
    for tmp in removed:
        tmp.unlink(missing_ok=True)
    return removed


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """Yield an empty hidden folder next to `path`; once the block ends it takes `path`'s place (a folder there
    before is moved aside, then deleted), on error it is deleted. Readers see the old folder or the new one whole;
    a kill between the two renames leaves `path` absent and only hidden folders (`remove_stale_folders`)."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}{FOLDER_SUFFIX}"
    old = path.parent / f".{path.name}.{os.getpid()}.old{FOLDER_SUFFIX}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process writes no folder yet when it cleans up: a kill of an earlier call left it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's live process
    return True


def remove_stale_folders(parent: str | Path) -> list[Path]:
    """Delete the temporary folders `atomic_folder` left in `parent` when its writer was killed (those of a live
    process on this machine are left alone)."""
    removed = []
    for folder in sorted(Path(parent).glob(f".*{FOLDER_SUFFIX}")):
        pid = folder.name[: -len(FOLDER_SUFFIX)].removesuffix(".old").rsplit(".", 1)[-1]
        if folder.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _write_all(tmp: Path, data: bytes) -> None:
    """Write `data` into the temporary file `tmp` (the one place where bytes reach a file)."""
    with open(tmp, "wb") as f:
        f.write(data)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` as the file `path`, atomically (`atomic_path`)."""
    with atomic_path(path) as tmp:
        _write_all(tmp, data)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) as the file `path`, atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def save_safetensors_atomic(path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` (contiguous CPU tensors by name) as the safetensors file `path`, atomically: serialised to
    bytes and written here, never by safetensors' own file writer (see the module docstring)."""
    from safetensors.torch import save

    write_bytes_atomic(path, save(tensors, metadata=metadata))


def finite_or_null(obj: Any) -> Any:
    """`obj` with every float that is not finite (NaN, +-inf) replaced by None, in nested dicts and lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj


def strict_json(obj: Any, **kwargs: Any) -> str:
    """`json.dumps` of `obj` as strict JSON: non-finite numbers written as null (`finite_or_null`)."""
    return json.dumps(finite_or_null(obj), allow_nan=False, **kwargs)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, strict_json(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl_atomic(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Rewrite a JSONL file with `records` (how results.jsonl is "appended" atomically), in strict JSON."""
    write_text_atomic(path, "".join(strict_json(r, sort_keys=True) + "\n" for r in records))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise UsageError(f"{path}:{number} is not valid JSON ({e.msg}); the file is corrupt") from None
    return out
