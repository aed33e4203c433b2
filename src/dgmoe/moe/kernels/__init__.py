"""Triton kernels for the sparse layer (imported lazily: `import dgmoe` never imports triton).

- `expert_dispatch` (`dgmoe.moe.kernels.experts`): the experts as gather-GEMM and GEMM-scatter kernels with
  fused prologues and epilogues, forward and backward, bf16 and fp32 (TF32 on request); the dispatch
  signature of `dgmoe.moe.dispatch.masked_dispatch`, with no host reads.
- `fused_route` (`dgmoe.moe.kernels.router`): noise, softmax, top-k, renormalisation and the balance terms'
  importance and load sums in one kernel per direction, after the router's projection.

Both are custom operators (`torch.library.custom_op`) that torch.compile captures in its graph; the experts'
tiles are autotuned per shape on a GPU (`dgmoe.moe.kernels.tiles`).

`available()` says whether triton imports here; a machine without it keeps the torch paths. On the CPU the
kernels run under Triton's interpreter (`TRITON_INTERPRET=1`, set before triton is imported): that is how
tests/moe/kernels checks them against the mask oracle and `MoEMlp.route`.
"""
from __future__ import annotations

from typing import Any

#: the expert activations the kernels fuse into the first GEMM's epilogue (`dgmoe.moe.experts.ACTIVATIONS`)
FUSED_ACTIVATIONS: tuple[str, ...] = ("gelu", "quick_gelu")


#: the answer of `available`, once asked (a plain list, not functools.cache: torch.compile reads it as a constant
#: under a guard, where it would warn about a cache wrapper)
_AVAILABLE: list[bool] = []


def _triton_imports() -> bool:
    try:
        import triton
    except Exception:  # noqa: BLE001 - a broken install is as unavailable as a missing one
        return False
    major, minor = (int(p) for p in triton.__version__.split(".")[:2])
    return (major, minor) >= (3, 2)


def available() -> bool:
    """True when triton (>= 3.2) imports (asked once per process)."""
    if not _AVAILABLE:
        _AVAILABLE.append(_triton_imports())
    return _AVAILABLE[0]


def require() -> None:
    if not available():
        raise RuntimeError("the Triton kernels need triton >= 3.2 (pip install 'dgmoe[triton]'); the torch "
                           "dispatch paths ('grouped', 'mask') need nothing more")


def expert_dispatch(*args: Any, **kwargs: Any) -> Any:
    """`dgmoe.moe.kernels.experts.expert_dispatch` (imports triton on first use)."""
    require()
    from dgmoe.moe.kernels.experts import expert_dispatch as run
    return run(*args, **kwargs)


def fused_route(*args: Any, **kwargs: Any) -> Any:
    """`dgmoe.moe.kernels.router.fused_route` (imports triton on first use)."""
    require()
    from dgmoe.moe.kernels.router import fused_route as run
    return run(*args, **kwargs)
