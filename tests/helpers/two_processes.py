"""Run a function on two gloo processes of this machine, as torchrun would start them, and read back what
rank 0 returned. The processes meet through a file store in the test's folder (no port to race for), and
leave together: a barrier after the last collective, then `destroy_process_group` on every rank, so that no
rank tears its connections down while its peer still talks to it (gloo aborts the peer then)."""
from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def run_on_two_processes(fn: Callable[[int, int], Any], folder: Path) -> Any:
    """`fn(rank, world_size)` on two spawned processes; rank 0's result (saved with `torch.save`)."""
    out, store = folder / "rank0.pt", folder / "process_group_store"
    mp.spawn(_worker, args=(fn, str(store), str(out)), nprocs=WORLD, join=True)
    return torch.load(out, weights_only=True)


def _worker(rank: int, fn: Callable[[int, int], Any], store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    try:
        result = fn(rank, WORLD)
        if rank == 0:
            torch.save(result, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
