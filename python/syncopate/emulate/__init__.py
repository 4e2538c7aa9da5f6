"""The CPU emulator and race checker (docs/emulator.md).

``emulate(...)`` fuses a kernel with a schedule (the pass pipeline through
``resolve-chunks``), runs the fused module for W emulated ranks on numpy under several
interleaving policies and launches, checks it for races (reads before arrival, early signals,
write-after-read across launches, deadlocks) and compares each rank's outputs with the unfused
kernel emulated by the same interpreter.
"""

from .api import (DEFAULT_POLICIES, Emulation, EmulationResult, PerRank, emulate, emulate_module,
                  fuse_module, kernel_ttir)
from .checker import Race
from .comm import Faults

__all__ = ["DEFAULT_POLICIES", "Emulation", "EmulationResult", "Faults", "PerRank", "Race",
           "emulate", "emulate_module", "fuse_module", "kernel_ttir"]
