"""Reading the chunk table (``syn_table``, :mod:`syncopate.chunk_table`) from the fused kernel.

The ``lowering="table"`` forms of ``resolve-chunks``, ``partition-sms`` and the ``lower-*``
passes emit loops over per-rank lists of the table instead of code per chunk; this is the one
place that turns the table's layout into loads.  Every list length read from the table is
clamped to the longest list the schedule has (a compile-time constant), so a corrupted table
cannot make a loop run away; the runtime refuses a table that disagrees with the schedule
before its first upload (``chunk_table.validate``).
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from syncopate import chunk_table as ct

from .builder import Builder
from .lowering import addptr, scalar_load


class TableReader:
    """Loads of table words through the ``syn_table`` pointer ``table``."""

    def __init__(self, table: SSAValue, layout: ct.TableLayout):
        self.table = table
        self.layout = layout

    def word(self, b: Builder, index: SSAValue | int) -> SSAValue:
        return scalar_load(b, addptr(b, self.table, b.value(index)))

    def rank_list(self, b: Builder, rank: SSAValue, lst: int,
                  longest: int) -> tuple[SSAValue, SSAValue]:
        """``(start, count)`` of list ``lst`` of ``rank``, ``count`` clamped to ``longest``."""
        per_rank = 2 * self.layout.lists_per_rank
        at = b.add(b.const(self.layout.entry(0, lst)), b.mul(rank, b.const(per_rank)))
        start = self.word(b, at)
        count = b.minsi(self.word(b, b.add(at, b.const(1))), b.const(longest))
        return start, count

    def record(self, b: Builder, chunk: SSAValue) -> SSAValue:
        """The word index of chunk ``chunk``'s record."""
        return b.add(b.const(self.layout.record(0)), b.mul(chunk, b.const(ct.REC_WORDS)))

    def field(self, b: Builder, rec: SSAValue, offset: int) -> SSAValue:
        return self.word(b, b.add(rec, b.const(offset)))

    def each(self, b: Builder, start: SSAValue, count: SSAValue, inits=()):
        """A loop over the list ``[start, start + count)``: ``(loop, body builder, chunk id,
        carried values)``; the caller ends the body with ``scf.yield``."""
        loop, lb, k, carried = b.for_(b.const(0), count, b.const(1), inits)
        cid = self.word(lb, lb.add(start, k))
        return loop, lb, cid, carried

    def over_tensor_list(self, b: Builder, sched, rank: SSAValue, tensor: str, which: str,
                         carry_zero: bool = False):
        """A loop over ``rank``'s RECV (``which="recv"``) or SEND list of ``tensor``:
        ``(loop, body builder, chunk id, carried values, the chunk's record index)``; with
        ``carry_zero`` the loop carries one i32 that starts at 0 (a wait token)."""
        slot = ct.tensor_slots(sched)[tensor]
        if which == "recv":
            lists, lst = ct.recv_list, self.layout.recv(slot)
        else:
            lists, lst = ct.send_list, self.layout.send(slot)
        n_max = longest(lists(sched, r, tensor) for r in range(sched.world_size))
        start, count = self.rank_list(b, rank, lst, n_max)
        loop, lb, cid, carried = self.each(b, start, count, [b.const(0)] if carry_zero else [])
        return loop, lb, cid, carried, self.record(lb, cid)


def longest(lists) -> int:
    """The length of the longest of ``lists`` (the clamp of a loop over one of them)."""
    return max([len(x) for x in lists] + [0])
