"""The backends: how a fused kernel's chunks move, as data. Each of ``sm``, ``ce``, ``nvshmem``
is one frozen :class:`BackendSpec` -- flag type, comm programs or side stream, who executes a
``sum`` chunk, pipeline tail, reduce modes, option checks, the cost model's link -- that the
ABI, the passes, the schedule's execution and cost models, the emulator, the runtime and the
ops read; no backend name is compared outside this package. The host side of each (its
launcher) lives with the runtime (:mod:`syncopate.runtime.launchers`). docs/backends.md: what a
backend owns, how to add one.

Pure data: imports nothing of the project but :mod:`syncopate.errors`, nothing but the standard
library (no torch, Triton or xDSL).
"""

from __future__ import annotations

from ..errors import CompileError
from .ce import CE
from .nvshmem import NVSHMEM
from .sm import SM
from .spec import _REGISTRY, REDUCE_MODES, BackendSpec

__all__ = ["BackendSpec", "REDUCE_MODES", "get", "names", "register", "specs"]


def register(spec: BackendSpec) -> BackendSpec:
    """Add ``spec`` to the registry (its ``name`` must be new)."""
    if spec.name in _REGISTRY:
        raise ValueError(f"backend name {spec.name!r} is taken")
    _REGISTRY[spec.name] = spec
    return spec


def names() -> tuple[str, ...]:
    """The registered backends' names, in registration order."""
    return tuple(_REGISTRY)


def specs() -> tuple[BackendSpec, ...]:
    """The registered backends, in registration order."""
    return tuple(_REGISTRY.values())


def get(name, error: type[Exception] = CompileError, context: str = "") -> BackendSpec:
    """The backend called ``name`` (a :class:`BackendSpec` passes through); an unknown name
    raises ``error`` (``CompileError`` by default, ``LaunchError`` in the runtime,
    ``ScheduleError`` in the schedule package), prefixed with ``context``, naming the choices."""
    if isinstance(name, BackendSpec):
        return name
    spec = _REGISTRY.get(name)
    if spec is None:
        raise error(f"{context}unknown backend {name!r}; choose one of {', '.join(_REGISTRY)}")
    return spec


# The registry: one line per backend (the order is the one error messages and CLIs list).
register(SM)
register(CE)
register(NVSHMEM)
