"""Read what W&B logged offline: the records of `<dir>/wandb/offline-run-*/run-<id>.wandb` files.

A `.wandb` file is W&B's header (`:W&B`, 2 bytes of magic, 1 of version) followed by LevelDB's log format: 32 KiB
blocks of chunks, each with a 7-byte header (CRC32C, length, type: 1 full, 2 first, 3 middle, 4 last) holding a
serialised `wandb_internal_pb2.Record`. wandb 0.2x dropped its Python reader (the Go core writes these files), so
the tests read them here.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32768


def _chunks(data: bytes) -> list[bytes]:
    if data[:4] != b":W&B":
        raise ValueError("not a W&B transaction log")
    pos, out, partial = 7, [], b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # the zero padding at a block's end
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            out.append(partial + chunk)
    return out


@dataclass
class OfflineRun:
    run_id: str
    config: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)  # each logged row, `_step` included


def read_offline_runs(folder: Path) -> list[OfflineRun]:
    """Every offline W&B run segment under `folder/wandb`, oldest first."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for path in sorted(Path(folder).glob("wandb/offline-run-*/run-*.wandb")):
        run = OfflineRun(path.stem.removeprefix("run-"))
        for chunk in _chunks(path.read_bytes()):
            record = pb.Record()
            record.ParseFromString(chunk)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
                run.tags += list(record.run.tags)
            elif kind == "config":
                run.config.update({u.key: json.loads(u.value_json) for u in record.config.update})
            elif kind == "history":
                run.history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                    for i in record.history.item})
        runs.append(run)
    return runs
