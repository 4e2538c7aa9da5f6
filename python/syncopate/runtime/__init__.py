"""The Syncopate runtime: process groups and symmetric memory (:class:`Communicator`), the
watchdog (:mod:`.diag`), host-side sync kernels (:mod:`.sync_kernels`), and :func:`fuse`.

Imports are lazy so that ``import syncopate.runtime`` works without torch or Triton.
"""

__all__ = ["Communicator", "FusedKernel", "fuse", "fused_enabled"]


def __getattr__(name):
    if name == "Communicator":
        from .communicator import Communicator
        return Communicator
    if name in ("FusedKernel", "fuse", "fused_enabled"):
        from . import fused
        return getattr(fused, name)
    raise AttributeError(f"module 'syncopate.runtime' has no attribute {name!r}")
