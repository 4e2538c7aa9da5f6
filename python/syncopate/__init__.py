"""Syncopate: fuse a single-GPU Triton kernel with a chunk schedule into one multi-GPU kernel
that overlaps communication with computation at chunk granularity.

The public surface:

* :mod:`syncopate.schedule` -- chunk schedules (model, templates, JSON, verifier, cost model)
* :func:`syncopate.compile` -- CPU-only compile of a fused kernel to TTIR/TTGIR/LLIR/PTX/cubin
* :func:`syncopate.fuse` -- a launchable fused kernel on GPUs (runtime)
* :func:`syncopate.emulate` -- the fused kernel on W emulated ranks on numpy, race-checked
"""

from .errors import (CommTimeout, CompileError, EmulationError, LaunchError, ScheduleError, SyncopateError,
                     TimeoutRecord, UnknownOpError)
from . import settings

__version__ = "0.1.0"

__all__ = [
    "CommTimeout", "CompileError", "EmulationError", "LaunchError", "ScheduleError", "SyncopateError",
    "TimeoutRecord", "UnknownOpError", "__version__",
]


def _install_hook_from_env() -> None:
    """``SYNCOPATE=1``: install the Triton compile hook at import (idempotent, chains others)."""
    if settings.SYNCOPATE.get() is True:
        from syncopate_mlir import hook

        hook.install()


_install_hook_from_env()


def __getattr__(name):
    # Lazy so that `import syncopate` (e.g. for schedules or the CLI) does not import Triton.
    if name in ("compile", "FusedCompile"):
        from . import compiler
        return getattr(compiler, name)
    if name in ("emulate", "EmulationResult"):
        # the package syncopate.emulate is itself callable (it forwards to emulate.emulate), so
        # `syncopate.emulate(...)` works whether or not the subpackage was imported before
        import importlib
        pkg = importlib.import_module(".emulate", __name__)
        return pkg if name == "emulate" else getattr(pkg, name)
    if name in ("fuse", "FusedKernel"):
        from .runtime import fused
        return getattr(fused, name)
    raise AttributeError(f"module 'syncopate' has no attribute {name!r}")
