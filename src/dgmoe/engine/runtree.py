"""Finding run folders under a root: what `dgmoe results`, `dgmoe report` and `dgmoe soup` read.

A run folder is one that holds a marker file (`results.jsonl`, `config.json`), at any depth. Symbolic links to
folders are followed (runs gathered from several disks into one root by links are read), each folder once: the
real folders are read first, then the links; a link to a folder read already, or to one of its own parents (a
loop), is not read again and is named, as is a link to nothing. A folder that cannot be listed (another user's
runs made under a strict umask) is named with the reason, never left out silently.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class RunTree:
    """The run folders under a root (sorted), the folders that could not be listed with the reason, e.g.
    (folder, "permission denied"), and the links that were not followed ("link (why)")."""

    found: list[Path] = field(default_factory=list)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    def unreadable_named(self) -> list[str]:
        """'folder (reason)' of each folder that could not be listed."""
        return [f"{folder} ({why})" for folder, why in self.unreadable]


def os_reason(err: OSError) -> str:
    """What an OS error says, as a reason in a sentence: "permission denied" (safetensors and others say "No such
    file or directory" for a file they may not read: ask the OS first)."""
    return (err.strerror or type(err).__name__).lower()


def walk_run_folders(root: str | os.PathLike, marker: str,
                     skip: Callable[[str], bool] = lambda name: False) -> RunTree:
    """Every folder under `root` (itself included) that holds a file named `marker`; sub-folders whose name
    `skip` accepts (e.g. the hidden temporaries of a killed writer) are not looked into."""
    tree = RunTree()
    seen: dict[tuple[int, int], Path] = {}
    pending: list[Path] = []  # links to folders: read once every real folder has been

    def visit(folder: Path, is_link: bool) -> None:
        try:
            st = folder.stat()
        except OSError as err:
            tree.unreadable.append((folder, os_reason(err)))
            return
        key = (st.st_dev, st.st_ino)
        if key in seen:
            if is_link:
                tree.links.append(f"{folder} (a link to {seen[key]}, read once already)")
            return
        seen[key] = folder
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            tree.unreadable.append((folder, os_reason(err)))
            return
        for entry in entries:
            try:
                if entry.name == marker and entry.is_file():
                    tree.found.append(folder)
                    continue
                link = entry.is_symlink()
                if link and not os.path.exists(entry.path):
                    tree.links.append(f"{folder / entry.name} (a link to {os.readlink(entry.path)}, which does not "
                                      "exist)")
                elif entry.is_dir() and not skip(entry.name):
                    if link:
                        pending.append(folder / entry.name)
                    else:
                        visit(folder / entry.name, False)
            except OSError as err:
                tree.unreadable.append((folder / entry.name, os_reason(err)))

    visit(Path(root), Path(root).is_symlink())
    while pending:
        visit(pending.pop(0), True)
    tree.found.sort()
    return tree
