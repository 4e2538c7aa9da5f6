"""The 2-d copy view of N-d chunks (``backends.sm.copy_view``).

Why: the sm comm programs copy 2-d tiles, and the Ulysses plan's chunks are boxes of 4-d
``[B, H, S, D]`` tensors.  A box is copied through a split of the dims into rows and columns in
which it is a 2-d box; the lowering, the table lowering and the emulator all use this one
definition, so the elements a tile copies must be exactly the box's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from syncopate.backends.sm import copy_view, view_box, view_shape
from syncopate.emulate.comm import region_offsets


def _elements(shape, lo, hi):
    return set(int(x) for x in region_offsets(shape, lo, hi))


def _view_elements(shape, k, lo, hi):
    (r0, c0), (r1, c1) = view_box(shape, k, lo, hi)
    cols = view_shape(shape, k)[1]
    return {r * cols + c for r in range(r0, r1) for c in range(c0, c1)}


def test_low_ranks_keep_their_views():
    assert copy_view((16,), [((2,), (5,))]) == 0
    assert copy_view((16, 8), [((2, 1), (5, 3))]) == 1


@pytest.mark.parametrize("B", [1, 2])
def test_one_head_of_all_batches(B):
    shape = (B, 4, 16, 8)
    boxes = [((0, h, s, 0), (B, h + 1, s + 4, 8)) for h in range(4) for s in (0, 4, 8, 12)]
    k = copy_view(shape, boxes)
    assert k == (3 if B == 1 else 1)
    for lo, hi in boxes:
        assert _view_elements(shape, k, lo, hi) == _elements(shape, lo, hi)


def test_boxes_no_view_fits_are_refused():
    # two heads of two batches, a sequence block: no split makes it 2-d
    assert copy_view((2, 4, 16, 8), [((0, 0, 4, 0), (2, 2, 8, 8))]) is None


def test_every_view_box_is_its_elements():
    rng = np.random.default_rng(0)
    shape = (3, 2, 4, 5)
    for _ in range(200):
        lo = [int(rng.integers(0, n)) for n in shape]
        hi = [int(rng.integers(a + 1, n + 1)) for a, n in zip(lo, shape)]
        k = copy_view(shape, [(lo, hi)])
        if k is None:
            continue
        assert _view_elements(shape, k, lo, hi) == _elements(shape, lo, hi)
    # and a box that is one everywhere (the whole tensor) takes the largest split
    assert copy_view(shape, [((0,) * 4, shape)]) == 3
    assert all(copy_view(shape, [((i, j, 0, 0), (i + 1, j + 1, 4, 5))]) == 3
               for i, j in itertools.product(range(3), range(2)))
