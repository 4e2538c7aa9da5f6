"""The 2-d view in which the comm programs copy the chunks of an N-d tensor.

Why: the copy loops (``lower_sm.copy_loop``, the table lowering's, the emulator's model of
them) move ``rows x cols`` tiles of a row-major 2-d array.  A chunk of an N-d tensor is a box;
it is a rectangle of a 2-d view of the same memory when the tensor's dims are cut into a
leading group (the view's rows) and a trailing group (its columns) such that, in each group,
the box is one contiguous range of the group's flattened index: the dims before the first dim
the box spans more than one index of have extent 1, and the dims after it are whole.  K/V of
ring attention ``[B*H, S, D]`` gathered along the sequence (boxes ``[0:BH, a:b, 0:D]``) are
rows ``B*H`` by columns ``S*D``.

One cut per tensor, from all of its chunks (the table lowering copies every chunk of a kind
with one tile shape, and a kind is per tensor): the first cut, counting from the left, at which
every chunk is a rectangle -- the most columns, so the longest contiguous runs.  A 1-d tensor is
one row; a 2-d tensor is itself.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import ScheduleError


def _contiguous(lo: Sequence[int], hi: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether the box ``[lo, hi)`` of a row-major ``shape`` is one contiguous range."""
    for j in range(len(shape)):
        if hi[j] - lo[j] != 1:
            return all(lo[d] == 0 and hi[d] == shape[d] for d in range(j + 1, len(shape)))
    return True


@dataclass(frozen=True)
class CopyView:
    """Dims ``[0, cut)`` are the view's rows, ``[cut, n)`` its columns."""

    shape: tuple[int, ...]
    cut: int

    @property
    def shape2(self) -> tuple[int, int]:
        return math.prod(self.shape[:self.cut]), math.prod(self.shape[self.cut:])

    def strides(self) -> tuple[int, ...]:
        """Each dim's stride inside its group (the flattened group index's weights)."""
        out = [1] * len(self.shape)
        for lo, hi in ((0, self.cut), (self.cut, len(self.shape))):
            s = 1
            for d in range(hi - 1, lo - 1, -1):
                out[d] = s
                s *= self.shape[d]
        return tuple(out)

    def box2(self, lo: Sequence, hi: Sequence, add: Callable = None, mul: Callable = None,
             sub: Callable = None) -> tuple[tuple, tuple]:
        """``(lo2, hi2)`` of the box ``[lo, hi)`` in the view.  Bounds are ints, or values of an
        IR builder when ``add``/``mul``/``sub`` are given (the table lowering reads them from a
        chunk record): ``lo2 = sum(lo_d * stride_d)`` and ``hi2 = lo2 + prod(hi_d - lo_d)`` per
        group, which is the group's flattened range when the box is contiguous in it."""
        if len(self.shape) == 1:
            return (0, lo[0]), (1, hi[0])
        if len(self.shape) == 2:
            return tuple(lo), tuple(hi)
        add, mul, sub = add or operator.add, mul or operator.mul, sub or operator.sub
        st = self.strides()
        lo2, hi2 = [], []
        for g0, g1 in ((0, self.cut), (self.cut, len(self.shape))):
            first = vol = None
            for d in range(g0, g1):
                term = lo[d] if st[d] == 1 else mul(lo[d], st[d])
                first = term if first is None else add(first, term)
                ext = sub(hi[d], lo[d])
                vol = ext if vol is None else mul(vol, ext)
            lo2.append(first)
            hi2.append(add(first, vol))
        return tuple(lo2), tuple(hi2)


def copy_view(shape: Sequence[int], boxes: Sequence[tuple[Sequence[int], Sequence[int]]],
              tensor: str = "?") -> CopyView:
    """The :class:`CopyView` of a tensor whose chunks are ``boxes`` (``(lo, hi)`` pairs);
    :class:`ScheduleError` when no cut makes every box a rectangle."""
    shape = tuple(int(n) for n in shape)
    n = len(shape)
    if n <= 2:
        return CopyView(shape, min(1, n - 1) if n == 2 else 0)
    for cut in range(1, n):
        if all(_contiguous(lo[:cut], hi[:cut], shape[:cut])
               and _contiguous(lo[cut:], hi[cut:], shape[cut:]) for lo, hi in boxes):
            return CopyView(shape, cut)
    raise ScheduleError(f"the chunks of tensor {tensor!r} {list(shape)} are not rectangles of any "
                        f"2-d view of it (rows = leading dims, columns = trailing dims), which "
                        f"the comm programs' copies need: cut the chunks along one dim and keep "
                        f"the dims after it whole")


def schedule_copy_view(schedule, tensor: str) -> CopyView:
    """The :class:`CopyView` of ``schedule``'s ``tensor`` from all of its chunks."""
    shape = schedule.tensors[tensor].shape
    boxes = [(c.lo, c.hi) for c in schedule.chunks if c.tensor == tensor]
    return copy_view(shape, boxes, tensor)


__all__ = ["CopyView", "copy_view", "schedule_copy_view"]
