"""What produced a run: library versions, the source commit and the machine, recorded in `config.json`
and in the metadata of every weights file, so a number in a table can be traced back to its code."""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


@functools.lru_cache(maxsize=1)
def source_commit() -> str | None:
    """The git commit of the dgmoe source tree (with `+dirty` when it has uncommitted changes), or None
    for an installed wheel or when git is unavailable."""
    package_dir = Path(__file__).resolve().parents[1]
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(package_dir), *args], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()

        top = Path(git("rev-parse", "--show-toplevel"))
        if not (top / "pyproject.toml").is_file() or package_dir.parents[1] != top:
            return None  # dgmoe installed inside someone else's repository: that commit is not dgmoe's
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", str(package_dir)))
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def provenance(device: str = "cpu") -> dict[str, Any]:
    """Versions of dgmoe, torch, Python, numpy and CUDA, the source commit, the host and the time."""
    from dgmoe import __version__

    cuda = torch.version.cuda if torch.cuda.is_available() else None
    info: dict[str, Any] = {
        "dgmoe": __version__, "torch": torch.__version__, "python": platform.python_version(),
        "numpy": np.__version__, "cuda": cuda, "git_commit": source_commit(), "host": socket.gethostname(),
        "platform": platform.platform(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def as_metadata(info: dict[str, Any]) -> dict[str, str]:
    """The provenance as safetensors metadata (string values; absent facts left out)."""
    return {k: str(v) for k, v in info.items() if v is not None}


@functools.lru_cache(maxsize=256)
def _digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """A file's SHA-256 (hex), computed once per version of the file: the cache is keyed on its size,
    modification time and inode, so a file replaced at the same path is hashed again."""
    st = os.stat(path)
    return _digest(str(path), st.st_size, st.st_mtime_ns, st.st_ino)


def file_hash(path: str) -> str:
    """The first 12 hex digits of a file's SHA-256 (how tables name a pretrained checkpoint's content)."""
    return file_sha256(path)[:12]


def pretrained_identity(pretrained: str | None) -> str | None:
    """'name (sha256 abc123...)' of a pretrained checkpoint, 'name (file absent)' when it is not on this
    machine, None for a backbone trained from scratch."""
    if not pretrained:
        return None
    path = Path(pretrained)
    return f"{path.name} (sha256 {file_hash(str(path))})" if path.is_file() else f"{path.name} (file absent)"


def initialisation(pretrained: str | None, seed: int) -> str:
    """A run's step-0 weights: its pretrained checkpoint's identity (`pretrained_identity`), or 'random init,
    seed N' for a backbone trained from scratch (its initialisation is a function of that seed). A run records
    it in config.json when it starts, so that what it was fine-tuned from stays known after the file is
    replaced."""
    return pretrained_identity(pretrained) or f"random init, seed {seed}"
