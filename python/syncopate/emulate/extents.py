"""Run-time extents in the emulator: chunks whose valid rows are counted on the device.

A chunk with ``extra["valid_rows"] = {"tensor": CNT, "index": i}`` (docs/moe.md,
:mod:`syncopate.schedule.verify_extent`) holds data only in the first ``clamp(CNT[i], 0,
rows)`` rows of its region along dim 0. The emulator copies exactly that prefix, reading the
count from the source rank's ``CNT`` buffer, next to the data, at the moment of the copy (a
checked read: a count that has not arrived is a read-before-arrival). The rows past the count are never
written on the destination, so they keep an older launch's epoch in the race checker's shadow
state: a compute program that loads one of them is reported as reading before arrival. That is
how a consumer that ignores the count -- reads padding as if it were data -- is caught, and
why the prefix copy is the stricter model of the two a runtime may implement (copying the whole
static region is the other; it delivers a superset).

The final-region comparison of a consumed tensor with the gathered inputs skips those rows
(:func:`undefined_boxes`): they are padding by contract.
"""

from __future__ import annotations

from ..schedule.verify_extent import valid_rows


def clip_to_count(lo, hi, count: int):
    """The prefix ``[lo, hi)`` of a box with ``count`` rows along dim 0 (clamped to the box)."""
    n = min(max(int(count), 0), hi[0] - lo[0])
    return tuple(lo), (lo[0] + n,) + tuple(hi[1:])


def undefined_boxes(schedule, tensor: str, rank: int, counts_of) -> list[tuple]:
    """``(lo, hi)`` boxes of ``tensor`` on ``rank`` that hold no data by contract: the rows past
    the count of every ``valid_rows`` chunk delivered to ``rank``. ``counts_of(name)`` gives
    the flat int array of the count tensor as the rank holds it after the launch."""
    out = []
    for c in schedule.chunks:
        vr = valid_rows(c)
        if c.tensor != tensor or c.dst != rank or vr is None:
            continue
        _, hi_valid = clip_to_count(c.lo, c.hi, counts_of(vr[0])[vr[1]])
        if hi_valid[0] < c.hi[0]:
            out.append(((hi_valid[0],) + tuple(c.lo[1:]), tuple(c.hi)))
    return out
