"""Forward scopes: values that the forwards run inside a `with` block read, without being passed through
every module (the batch's shard, MoGE's routing context, whether sparse layers record their auxiliary
terms, whether the graph must support double backward).

They are attributes of one module-level object rather than `contextvars.ContextVar`s because torch.compile
cannot trace `ContextVar.get` (a graph break in every MoE layer); dynamo reads these attributes and guards
on their values, so a compiled model recompiles only when a scope changes (e.g. a sharded batch after an
unsharded one). One forward runs at a time in a process (the engine trains one run per process), so a
process-wide value is what a context variable held. Activation checkpointing's recomputation runs after
the forward's `with` blocks have closed: it carries the values with `snapshot()` and `restored(...)`.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields, replace
from typing import Any, Iterator


@dataclass
class ForwardScope:
    shard: Any = None                 # dgmoe.sharding.Shard of the batch being forwarded (None: unsharded)
    routing_context: Any = None       # [B, d] tensor r = phi(m) for image-routed MoE layers (MoGE)
    record_aux: bool = True           # sparse layers record their auxiliary terms in training forwards
    twice_differentiable: bool = False  # sparse layers build graphs that support double backward


SCOPE = ForwardScope()


@contextlib.contextmanager
def scoped(**values: Any) -> Iterator[None]:
    """Set some of `SCOPE`'s fields for the forwards inside the block, restoring them afterwards."""
    names = {f.name for f in fields(ForwardScope)}
    unknown = set(values) - names
    if unknown:
        raise TypeError(f"unknown forward scope field(s) {sorted(unknown)}; valid: {sorted(names)}")
    previous = {name: getattr(SCOPE, name) for name in values}
    for name, value in values.items():
        setattr(SCOPE, name, value)
    try:
        yield
    finally:
        for name, value in previous.items():
            setattr(SCOPE, name, value)


def snapshot() -> ForwardScope:
    """The current values (a copy), to re-enter later with `restored`."""
    return replace(SCOPE)


@contextlib.contextmanager
def restored(values: ForwardScope) -> Iterator[None]:
    """Run the block with the scope `values` (from `snapshot()`), then restore the current one."""
    with scoped(**{f.name: getattr(values, f.name) for f in fields(ForwardScope)}):
        yield
