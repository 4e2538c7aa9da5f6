"""The CPU emulator and race checker (docs/emulator.md).

``emulate(...)`` fuses a kernel with a schedule (the pass pipeline through
``resolve-chunks``), runs the fused module for W emulated ranks on numpy under several
interleaving policies and launches, checks it for races (reads before arrival, early signals,
write-after-read across launches, deadlocks) and compares each rank's outputs with the unfused
kernel emulated by the same interpreter.
"""

# the interpreter's op handlers, by family (each module registers its ops on import)
from . import ops_arith, ops_control, ops_memory, ops_tensor  # noqa: F401
from .api import DEFAULT_POLICIES, Emulation, emulate, emulate_module
from .arguments import PerRank
from .checker import Race
from .comm import Faults
from .modules import fuse_module, kernel_ttir
from .result import EmulationResult

__all__ = ["DEFAULT_POLICIES", "Emulation", "EmulationResult", "Faults", "PerRank", "Race",
           "emulate", "emulate_module", "fuse_module", "kernel_ttir"]


import sys as _sys
import types as _types


class _CallableModule(_types.ModuleType):
    """``syncopate.emulate`` is both this package and the function: importing the subpackage
    makes it the ``emulate`` attribute of ``syncopate``, so the package forwards calls."""

    def __call__(self, *args, **kwargs):
        return emulate(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
