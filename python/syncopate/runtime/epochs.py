"""Epochs: launch numbers of a configuration, and the values 32-bit flags compare with."""

from __future__ import annotations

from ..errors import LaunchError
from . import diag

FLAG_LIMIT = 2**31 - 1


class EpochCounter:
    """Launch numbers of one configuration (one flag array): 1, 2, 3, ... (``syn_epoch`` is
    an i32).

    Flags hold ``epoch * count`` and only grow. They may wrap around 2^32 (a produced count of
    tens of thousands of tile signals wraps after ~10^5 launches): every spin compares with
    serial-number arithmetic, ``(int32)(flag - target) >= 0``, which is exact as long as a
    target is less than 2^31 ahead of the flag -- always true, since a flag is at most one
    epoch behind its target. The only hard limit is the epoch itself."""

    def __init__(self, limit: int = FLAG_LIMIT):
        self.value = 0
        self.limit = limit

    def next(self) -> int:
        e = self.value + 1
        if e > self.limit:
            raise LaunchError(f"epoch {e} does not fit syn_epoch (i32); create a new FusedKernel "
                              f"(fresh flags) to continue")
        self.value = e
        return e


def wrap32(x: int) -> int:
    """``x`` as the int32 a 32-bit flag holds after wrapping (targets of 32-bit spins)."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def kernel_timeout_ns(env=None) -> int:
    """``syn_timeout_ns`` for the fused kernel: the compiler's convention is that a negative
    value selects the ``trap`` action (docs/fused-abi.md, "Runtime notes")."""
    t = diag.timeout_ns(env)
    return -t if (t and diag.timeout_action(env) == "trap") else t
