"""The FP8 all-gather plan (``scaled_all_gather``): A ``[M, K]`` and its per-row scales
``[M, 1]`` cut into the same row pieces, each scale piece a chunk of the same step, source and
destination as A's piece of the same rows -- so a tile that waits for its rows of A finds their
scales in the same round. Verified by the schedule's symbolic execution, in both orders and
modes, and through the JSON format."""

from __future__ import annotations

import pytest

from syncopate.errors import ScheduleError
from syncopate.schedule import dumps, loads, verify
from syncopate.schedule.scaled_gather import scale_shape, scaled_all_gather


@pytest.mark.parametrize("order", ["swizzle", "ring"])
@pytest.mark.parametrize("mode", ["push", "pull"])
@pytest.mark.parametrize("W,split", [(2, 1), (4, 2), (3, 3)])
def test_scales_travel_with_their_rows(W, split, order, mode):
    M, K = 96 * W, 64
    s = scaled_all_gather((M, K), "fp8e4m3", W, order=order, mode=mode, split=split)
    verify(s)
    assert s.tensors["A"].shape == (M, K) and s.tensors["SA"].shape == (M, 1)
    assert s.tensors["A"].dtype == "fp8e4m3" and s.tensors["SA"].dtype == "fp32"
    a = [c for c in s.chunks if c.tensor == "A"]
    sa = [c for c in s.chunks if c.tensor == "SA"]
    assert len(a) == len(sa) == W * (W - 1) * split
    assert max(c.id for c in a) < min(c.id for c in sa)  # A's chunks first
    for ca, cs in zip(a, sa):
        assert (cs.src, cs.dst, cs.step, cs.mode) == (ca.src, ca.dst, ca.step, ca.mode)
        assert cs.region.offsets[0] == ca.region.offsets[0]
        assert cs.region.sizes[0] == ca.region.sizes[0] and cs.region.sizes[1] == 1
        assert len(cs.after) == len(ca.after)
    assert loads(dumps(s)) == s


def test_scale_shape_and_refusals():
    assert scale_shape((8192, 4096)) == (8192, 1)
    assert scale_shape((4, 8, 16), dim=1) == (1, 8, 1)
    with pytest.raises(ScheduleError, match="two distinct names"):
        scaled_all_gather((64, 32), "fp8e4m3", 2, tensors=("A", "A"))
    with pytest.raises(ScheduleError, match="tensors=\\('A', 'SA'\\)"):
        scaled_all_gather((64, 32), "fp8e4m3", 2, tensor="A")
    with pytest.raises(ScheduleError, match="split must be"):
        scaled_all_gather((64, 32), "fp8e4m3", 2, split=0)
