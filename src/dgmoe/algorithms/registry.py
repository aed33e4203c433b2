"""Algorithm lookup by name (DomainBed's `get_algorithm_class`, without `globals()`)."""
from __future__ import annotations

from dgmoe.registry import Registry

ALGORITHMS: Registry = Registry("algorithm")


def register_algorithm(cls):
    ALGORITHMS.add(cls.__name__, cls)
    return cls


def get_algorithm(name: str):
    return ALGORITHMS.get(name)


def list_algorithms() -> list[str]:
    return ALGORITHMS.names()
