"""The configs of the commands that list or prepare what a package holds (`dgmoe models`, `dgmoe algorithms`,
`dgmoe data`): those packages import torch when imported, these configs do not, so that `--help` starts at
once. Their options are generated from these fields (`dgmoe.cli.options`)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from dgmoe.peft.config import PEFT_MODES
from dgmoe.settings import Settings, existing_folder, setting


@dataclass(frozen=True)
class ModelsListConfig(Settings):
    """`dgmoe models [PATTERN]`."""

    pattern: str | None = setting(None, "A glob of model names such as 'gmoe*'.", argument=True)
    names_only: bool = setting(False, "Print the bare names only (one per line, for scripts).", flags=("--names",))
    params: bool = setting(True, "Kept for old scripts: counts are always shown.", hidden=True)
    peft: str | None = setting(None, "Parameter counts under parameter-efficient training (`dgmoe train --peft`, "
                                     "default knobs): trainable/total per mode, or for one mode ('-': the mode "
                                     "does not apply).", choices=("all", *PEFT_MODES[1:]))


@dataclass(frozen=True)
class AlgorithmsListConfig(Settings):
    """`dgmoe algorithms`."""

    references: bool = setting(True, "Print each algorithm's paper reference.")


_CACHE_DIR = "Cache root (default: $DGMOE_CACHE_DIR or ~/.cache/dgmoe/data)."


@dataclass(frozen=True)
class DataCheckConfig(Settings):
    """`dgmoe data check FOLDER`."""

    folder: str = setting("", "A dataset folder <domain>/<class>/<image>; for a dataset of another published "
                              "layout (ImageNetShifts, <Dataset>-OOP, Spawrious), the folder `train --data-dir` "
                              "names.", argument=True, required=True)
    dataset: str | None = setting(None, "Catalogue name [default: the dataset whose folder name, or else whose "
                                        "domains, the folder has].", flags=("--dataset", "-d"))
    content: bool = setting(False, "Also hash every file's path and bytes (streamed) and compare the content "
                                   "fingerprint with the versions dgmoe ships; exits 1 naming the files that "
                                   "differ.", flags=("--content",))


@dataclass(frozen=True)
class DataDownloadConfig(Settings):
    """`dgmoe data download NAME... --data-dir DATA`."""

    names: tuple[str, ...] = setting((), "Datasets to download (see --list).", argument=True)
    data_dir: str | None = setting(None, "Folder to install into, as <data-dir>/<DatasetDir> (required unless "
                                         "--list).")
    mirror: str | None = setting(None, "Fetch from this URL instead of the declared sources (a folder URL when "
                                       "the dataset comes as several files); verified the same way.")
    archive: str | None = setting(None, "Take this archive, fetched another way (a licence accepted by hand, a "
                                        "Drive copy); verified the same way.")
    force: bool = setting(False, "Replace an existing folder that differs (atomically, once the new one is "
                                 "verified).", flags=("--force",))
    list_sources: bool = setting(False, "Print every dataset's sources (or why it has none) and exit.",
                                 flags=("--list",))
    markdown: bool = setting(False, "With --list: print the table in Markdown (as README.md shows it).",
                             flags=("--markdown",))


@dataclass(frozen=True)
class DataInfoConfig(Settings):
    """`dgmoe data info`."""

    dataset: str = setting("", "Catalogue name (see `dgmoe data list`).", flags=("--dataset", "-d"), required=True)
    data_dir: str | None = setting(None, "Folder holding the dataset.")
    img_size: int | None = setting(None, "Storage size to check the cache for.", minimum=1)
    cache_dir: str | None = setting(None, _CACHE_DIR)


@dataclass(frozen=True)
class DataPrepareConfig(Settings):
    """`dgmoe data prepare`: decode a folder dataset once into the uint8 cache."""

    dataset: str = setting("", "Catalogue name (see `dgmoe data list`).", flags=("--dataset", "-d"), required=True)
    data_dir: str = setting("", "Folder holding the dataset.", required=True, parser=existing_folder)
    img_size: int = setting(224, "Square storage size in pixels.", minimum=1)
    cache_dir: str | None = setting(None, _CACHE_DIR)
    workers: int = setting(min(8, os.cpu_count() or 1), "Decoding processes (0 = in this process).", minimum=0)
    force: bool = setting(False, "Rebuild even when a valid cache exists.", flags=("--force",))


@dataclass(frozen=True)
class WeightsGetConfig(Settings):
    """`dgmoe weights get NAME --to DIR`."""

    name: str | None = setting(None, "A checkpoint (or a --model it fits; see --list).", argument=True)
    to: str | None = setting(None, "Folder to write <NAME>.safetensors and <NAME>.json into (required unless "
                                   "--list).")
    list_weights: bool = setting(False, "Print every checkpoint dgmoe can fetch and the models it fits.",
                                 flags=("--list",))
