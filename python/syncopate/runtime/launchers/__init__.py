"""The backends' host sides: one :class:`Launcher` class per :class:`~syncopate.backends.BackendSpec`,
to which ``FusedKernel`` hands each launch (docs/backends.md, "The launcher").

Light to import (no torch, no Triton): the launchers import those where they first need them.
"""

from __future__ import annotations

from ...backends import CE, NVSHMEM, SM, BackendSpec
from ...errors import LaunchError
from .base import Launcher
from .ce import CELauncher
from .nvshmem import NVSHMEMLauncher
from .sm import SMLauncher

__all__ = ["Launcher", "launcher", "register"]

_LAUNCHERS: dict[BackendSpec, type[Launcher]] = {}


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


# One line per backend.
register(SM, SMLauncher)
register(CE, CELauncher)
register(NVSHMEM, NVSHMEMLauncher)
