"""The 2-d copy view of N-d chunks (python/syncopate/schedule/copy_view.py): the cut, the box
arithmetic on ints and on builder values, and the refusal of chunks no 2-d view makes
rectangles of."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from syncopate.errors import ScheduleError
from syncopate.schedule import all_gather, all_to_all
from syncopate.schedule.copy_view import copy_view, schedule_copy_view
from syncopate.schedule.kv_gather import kv_all_gather


def _elements(shape, lo, hi):
    idx = np.arange(int(np.prod(shape))).reshape(shape)
    return set(idx[tuple(slice(a, b) for a, b in zip(lo, hi))].ravel().tolist())


def _check_view(shape, boxes):
    view = copy_view(shape, boxes)
    rows, cols = view.shape2
    assert rows * cols == int(np.prod(shape))
    for lo, hi in boxes:
        (r0, c0), (r1, c1) = view.box2(lo, hi)
        rect = {r * cols + c for r in range(r0, r1) for c in range(c0, c1)}
        assert rect == _elements(shape, lo, hi), (shape, lo, hi, view)
    return view


def test_sequence_chunks_of_a_3d_kv_tensor_are_rows_by_columns():
    """K/V of ring attention [B*H, S, D] gathered along S: rows B*H, columns S*D."""
    s = kv_all_gather((4, 256, 64), "bf16", 4, dim=1, split=2)
    view = schedule_copy_view(s, "K")
    assert view.cut == 1 and view.shape2 == (4, 256 * 64)
    _check_view((4, 256, 64), [(c.lo, c.hi) for c in s.chunks if c.tensor == "K"])


@pytest.mark.parametrize("shape,dim", [((6, 10, 8), 0), ((6, 10, 8), 1), ((6, 10, 8), 2),
                                       ((3, 4, 5, 6), 2), ((8,), 0), ((12, 20), 1)])
def test_every_all_gather_chunk_is_a_rectangle_of_its_view(shape, dim):
    s = all_gather(shape, "bf16", 2, dim=dim, split=2)
    _check_view(shape, [(c.lo, c.hi) for c in s.chunks])


def test_all_to_all_pieces_of_a_3d_tensor():
    """Head-wise all-to-all of [S, H, D] from sequence- to head-sharded: pieces [s0:s1, h0:h1,
    0:D] are rectangles of the view rows S by columns H*D."""
    shape = (16, 8, 4)
    s = all_to_all(shape, "bf16", 2, split_dim=0, concat_dim=1)
    view = _check_view(shape, [(c.lo, c.hi) for c in s.chunks])
    assert view.cut == 1


def test_box_arithmetic_on_builder_values_matches_ints():
    """The table lowering combines bounds read from a chunk record: the same formula through
    add/mul/sub callbacks gives what the int path gives."""
    view = copy_view((4, 256, 64), [((0, 64, 0), (4, 128, 64))])
    calls = []

    def rec(name, f):
        def g(a, b):
            calls.append(name)
            return f(a, b)
        return g
    got = view.box2((0, 64, 0), (4, 128, 64), add=rec("add", lambda a, b: a + b),
                    mul=rec("mul", lambda a, b: a * b), sub=rec("sub", lambda a, b: a - b))
    assert got == view.box2((0, 64, 0), (4, 128, 64)) == ((0, 64 * 64), (4, 128 * 64))
    assert calls, "the callbacks are used for N-d boxes"


def test_chunks_no_2d_view_can_copy_are_refused():
    """[0:2, 0:2, 0:2] of a 4x4x4 tensor: partial in every dim, no cut makes it a rectangle."""
    with pytest.raises(ScheduleError, match="not rectangles of any 2-d view"):
        copy_view((4, 4, 4), [((0, 0, 0), (2, 2, 2))])


def _rectangle_of_some_view(shape, lo, hi) -> bool:
    """The oracle, by brute force: the box's elements form a rectangle of the 2-d view with
    rows = dims [0, cut) and columns = dims [cut, n) for some cut (1 <= cut < n)."""
    elements = _elements(shape, lo, hi)
    for cut in range(1, len(shape)):
        cols = int(np.prod(shape[cut:]))
        rows_of = {e // cols for e in elements}
        cols_of = {e % cols for e in elements}
        if len(rows_of) * len(cols_of) == len(elements) and \
                max(rows_of) - min(rows_of) + 1 == len(rows_of) and \
                max(cols_of) - min(cols_of) + 1 == len(cols_of):
            return True
    return False


def test_small_exhaustive_boxes():
    """Every box of a 2x3x4 tensor: accepted exactly when some cut makes it a rectangle (the
    brute-force oracle above), and then it copies exactly its elements.  Counted, so that a
    copy_view refusing everything cannot pass: 180 boxes, 162 of them accepted."""
    shape = (2, 3, 4)
    boxes = accepted = 0
    for lo in itertools.product(*(range(n) for n in shape)):
        for hi in itertools.product(*(range(a + 1, n + 1) for a, n in zip(lo, shape))):
            boxes += 1
            want = _rectangle_of_some_view(shape, lo, hi)
            try:
                _check_view(shape, [(lo, hi)])
            except ScheduleError:
                assert not want, (lo, hi)
                continue
            assert want, (lo, hi)
            accepted += 1
    assert (boxes, accepted) == (180, 162)


