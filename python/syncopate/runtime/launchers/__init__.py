"""The backends' host sides: a :class:`Launcher` class per backend spec, to which ``FusedKernel``
hands each launch (docs/backends.md)."""

from __future__ import annotations

from ...backends import CE, NVSHMEM, SM, BackendSpec
from ...errors import LaunchError
from .base import Launcher
from .ce import CELauncher
from .nvshmem import NVSHMEMLauncher
from .sm import SMLauncher

__all__ = ["Launcher", "launcher", "register"]

#: spec -> its launcher class (one line per backend; :func:`register` adds one)
_LAUNCHERS: dict[BackendSpec, type[Launcher]] = {SM: SMLauncher, CE: CELauncher,
                                                  NVSHMEM: NVSHMEMLauncher}


def register(spec: BackendSpec, cls: type[Launcher]) -> None:
    """Launch ``spec``'s kernels with ``cls`` (one instance per FusedKernel)."""
    _LAUNCHERS[spec] = cls


def launcher(spec: BackendSpec, fk) -> Launcher:
    """A new launcher of ``spec`` for the FusedKernel ``fk``."""
    cls = _LAUNCHERS.get(spec)
    if cls is None:
        raise LaunchError(f"backend {spec.name!r} has no host launcher; register one with "
                          f"syncopate.runtime.launchers.register(spec, LauncherClass)")
    return cls(fk)
