"""The backends: how a fused kernel's chunks move, as objects (as Triton's compiler treats its
targets). Each of ``sm``, ``ce``, ``nvshmem`` owns its ABI facts (flag type, launch grid, chunk
writers), its pipeline tail (``partition-sms``? ``resolve-chunks``, ``lower-<name>``), its
defaults and compile-option checks, and its host-side :class:`Launcher`, to which
``FusedKernel`` delegates each launch. docs/backends.md: what a backend owns, how to add one
(one new module and a line below).

Light to import (no torch, no Triton): :mod:`syncopate.abi` and the passes ask it for flag
types, grids and defaults.
"""

from __future__ import annotations

from ..errors import CompileError
from .base import _REGISTRY, REDUCE_MODES, Backend, Launcher
from .ce import CE
from .nvshmem import NVSHMEM
from .sm import SM

__all__ = ["Backend", "Launcher", "REDUCE_MODES", "get", "names", "register"]


def register(backend: Backend) -> Backend:
    """Add ``backend`` to the registry (its ``name`` must be new)."""
    if not backend.name or backend.name in _REGISTRY:
        raise ValueError(f"backend name {backend.name!r} is empty or taken")
    _REGISTRY[backend.name] = backend
    return backend


def names() -> tuple[str, ...]:
    """The registered backends' names, in registration order."""
    return tuple(_REGISTRY)


def get(name, error: type[Exception] = CompileError, context: str = "") -> Backend:
    """The backend called ``name`` (a :class:`Backend` passes through); an unknown name raises
    ``error`` (``CompileError`` by default, ``LaunchError`` in the runtime), prefixed with
    ``context``, naming the choices."""
    if isinstance(name, Backend):
        return name
    be = _REGISTRY.get(name)
    if be is None:
        raise error(f"{context}unknown backend {name!r}; choose one of {', '.join(_REGISTRY)}")
    return be


# The registry: one line per backend (the order is the one error messages and CLIs list).
register(SM())
register(CE())
register(NVSHMEM())
