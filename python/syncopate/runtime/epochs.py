"""Epochs: launch numbers of a configuration, and the values 32-bit flags compare with."""

from __future__ import annotations

from .. import settings
from ..errors import LaunchError

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


def kernel_timeout_ns(env=None) -> int:
    """``syn_timeout_ns`` for the fused kernel: the compiler's convention is that a negative
    value selects the ``trap`` action (docs/fused-abi.md, "Runtime notes"). Without ``env``,
    the process environment through :func:`syncopate.settings.watchdog` (read at every launch,
    parsed once per value)."""
    t, action = settings.watchdog(env)
    return -t if (t and action == "trap") else t
