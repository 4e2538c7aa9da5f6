"""The Syncopate runtime: process groups and symmetric memory (:class:`Communicator`), the
watchdog (:mod:`.diag`), host-side sync kernels (:mod:`.sync_kernels`), and :func:`fuse`.

The names below load on first use: ``import syncopate.runtime`` stays free of torch and Triton,
so that the runtime's light parts (:mod:`.residency`) serve the CLI's start.
"""

__all__ = ["Communicator", "FusedKernel", "fuse", "fused_enabled"]


def __getattr__(name):
    if name == "Communicator":
        from .communicator import Communicator  # lazy: imports torch and Triton
        return Communicator
    if name in ("FusedKernel", "fuse", "fused_enabled"):
        from . import fused  # lazy: imports torch, Triton and the compiler
        return getattr(fused, name)
    raise AttributeError(f"module 'syncopate.runtime' has no attribute {name!r}")
