"""Run-time extents in the schedule model (``extra["valid_rows"]``, schedule/verify_extent.py)
and the ``moe_dispatch`` template: what verifies, what is refused and why, JSON round trip.

Every refusal below is a way copying only the counted rows could go wrong: a count that is not
there when the copier reads it, a destination that cannot know which rows are data, padding
forwarded as data, a half-reduced sum; each test checks that the verifier names it."""

from __future__ import annotations

import pytest

from syncopate.errors import ScheduleError
from syncopate.schedule import Chunk, Placement, Region, Schedule, TensorSpec, analyze
from syncopate.schedule.json_io import loads
from syncopate.schedule.moe import cnt_index, moe_dispatch, owner, x_group


def _sched(chunks, cnt_initial=((0, 0, 2),), cnt_final=((0, 0, 2), (1, 0, 2)), dtype="int32",
           cnt_shape=(2,), W=2, x_final=None):
    """X ``[8, 4]``: rank 0 holds rows 0..3 (two groups of 2 rows), rank 1 rows 4..7; CNT
    placements as given (rank, offset, size)."""
    x_init = [Placement(0, Region((0, 0), (4, 4))), Placement(1, Region((4, 0), (4, 4)))]
    x_fin = x_final or [Placement(r, Region((0, 0), (8, 4))) for r in range(W)]
    specs = {"X": TensorSpec("X", (8, 4), "bf16", x_init, x_fin),
             "CNT": TensorSpec("CNT", cnt_shape, dtype,
                               [Placement(r, Region((o,), (n,))) for r, o, n in cnt_initial],
                               [Placement(r, Region((o,), (n,))) for r, o, n in cnt_final])}
    return Schedule(W, specs, chunks)


def _data(cid, src, dst, row, vr, mode="pull", step=1, after=(), reduce="none"):
    extra = {"valid_rows": vr} if vr is not None else {}
    return Chunk(cid, "X", Region((row, 0), (2, 4)), src, dst, mode, step, reduce, after, extra)


def _count(cid, src, dst, off=0, n=2, mode="pull", step=0):
    return Chunk(cid, "CNT", Region((off,), (n,)), src, dst, mode, step)


def _rest(first_id):
    """Rank 1's rows to rank 0 and rank 0's second group to rank 1 (no extents)."""
    return [_data(first_id, 1, 0, 4, None), _data(first_id + 1, 1, 0, 6, None),
            _data(first_id + 2, 0, 1, 2, None)]


def test_well_formed_extent_verifies():
    s = _sched([_count(0, 0, 1), _data(1, 0, 1, 0, {"tensor": "CNT", "index": 0})] + _rest(2))
    assert analyze(s).problems == []


@pytest.mark.parametrize("vr,match", [
    ({"tensor": "CNT"}, "must be"),
    ({"tensor": "NOPE", "index": 0}, "does not have"),
    ({"tensor": "CNT", "index": 5}, "outside CNT"),
])
def test_malformed_annotations(vr, match):
    s = _sched([_count(0, 0, 1), _data(1, 0, 1, 0, vr)] + _rest(2))
    assert any(match in p for p in analyze(s).problems), analyze(s).problems


def test_count_tensor_must_be_1d_int32():
    s = _sched([_count(0, 0, 1), _data(1, 0, 1, 0, {"tensor": "CNT", "index": 0})] + _rest(2),
               dtype="fp32")
    assert any("must be 1-d int32" in p for p in analyze(s).problems)


def test_source_must_hold_the_count():
    """Rank 0 does not hold CNT initially (rank 1 does): the copier would read a count that
    was never written on the source."""
    s = _sched([_count(0, 1, 0), _data(1, 0, 1, 0, {"tensor": "CNT", "index": 0})] + _rest(2),
               cnt_initial=((1, 0, 2),))
    ps = analyze(s).problems
    assert any("reads CNT[0] on the source rank 0" in p for p in ps), ps


def test_count_received_by_the_source_before_the_chunk_is_enough():
    """The same, with the count chunk into rank 0 in the data chunk's after: it verifies."""
    s = _sched([_count(0, 1, 0), _data(1, 0, 1, 0, {"tensor": "CNT", "index": 0},
                                       after=(0,))] + _rest(2), cnt_initial=((1, 0, 2),))
    assert analyze(s).problems == []


def test_destination_must_end_with_the_count():
    s = _sched([_data(0, 0, 1, 0, {"tensor": "CNT", "index": 0})] + _rest(1),
               cnt_final=((0, 0, 2),))
    ps = analyze(s).problems
    assert any("destination rank 1 must end with CNT[0]" in p for p in ps), ps


def test_sum_cannot_have_an_extent():
    s = _sched([_count(0, 0, 1), _data(1, 0, 1, 0, {"tensor": "CNT", "index": 0},
                                       reduce="sum")] + _rest(2))
    assert any("a sum cannot have a run-time extent" in p for p in analyze(s).problems)


def test_forwarding_without_the_extent_is_refused():
    """W = 3: rank 1 forwards the group it received from rank 0 to rank 2 without valid_rows:
    it would pass padding on as data."""
    W = 3
    x_init = [Placement(0, Region((0, 0), (2, 4)))]
    specs = {"X": TensorSpec("X", (2, 4), "bf16", x_init,
                             [Placement(r, Region((0, 0), (2, 4))) for r in range(W)]),
             "CNT": TensorSpec("CNT", (1,), "int32", [Placement(0, Region((0,), (1,)))],
                               [Placement(r, Region((0,), (1,))) for r in range(W)])}
    vr = {"tensor": "CNT", "index": 0}
    chunks = [Chunk(0, "CNT", Region((0,), (1,)), 0, 1, "push", 0),
              Chunk(1, "CNT", Region((0,), (1,)), 0, 2, "push", 0),
              Chunk(2, "X", Region((0, 0), (2, 4)), 0, 1, "push", 1, extra={"valid_rows": vr}),
              Chunk(3, "X", Region((0, 0), (2, 4)), 1, 2, "push", 2, after=(2,))]
    ps = analyze(Schedule(W, specs, chunks)).problems
    assert any("forwards its rows from rank 1 without the same region and valid_rows" in p
               for p in ps), ps
    chunks[3] = Chunk(3, "X", Region((0, 0), (2, 4)), 1, 2, "push", 2, after=(0, 2),
                      extra={"valid_rows": vr})
    assert analyze(Schedule(W, specs, chunks)).problems == []


# ------------------------------------------------------------------------------------------------
# the moe_dispatch template
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("W,E", [(1, 4), (2, 4), (2, 8), (4, 8)])
@pytest.mark.parametrize("mode", ["pull", "push"])
def test_template_verifies(W, E, mode):
    s = moe_dispatch(W, E, 32, 64, mode=mode).verify()
    data = [c for c in s.chunks if c.tensor == "X"]
    counts = [c for c in s.chunks if c.tensor == "CNT"]
    assert len(counts) == W * (W - 1) and len(data) == W * (W - 1) * E
    for c in data:
        _, idx = c.extra["valid_rows"]["tensor"], c.extra["valid_rows"]["index"]
        s_, x = divmod(c.lo[0] // 32, E)
        assert (c.src, idx) == (s_, cnt_index(W, E, s_, c.dst, x))
        assert c.region.sizes == (32, 64) and x_group(E, s_, x) * 32 == c.lo[0]
    for d in range(W):  # a destination's own experts' chunks come first from each source
        mine = [c for c in data if c.dst == d]
        for s_ in range(W):
            from_s = sorted((c for c in mine if c.src == s_), key=lambda c: c.step)
            assert [owner(E, W, (c.lo[0] // 32) % E) for c in from_s][:E // W] == [d] * (E // W) \
                or not from_s


def test_template_round_trips_through_json():
    s = moe_dispatch(2, 4, 16, 32)
    s2 = loads(s.to_json())
    assert s2.content_hash() == s.content_hash()
    assert [c.extra for c in s2.chunks] == [c.extra for c in s.chunks]
    s2.verify()


@pytest.mark.parametrize("kwargs,match", [
    (dict(world_size=3, num_experts=4), "do not divide over 3 ranks"),
    (dict(capacity=0), "capacity must be a positive integer"),
    (dict(mode="both"), "mode must be"),
    (dict(counts="X"), "different tensor names"),
])
def test_template_refusals(kwargs, match):
    args = dict(world_size=2, num_experts=4, capacity=16, hidden=32)
    args.update(kwargs)
    with pytest.raises(ScheduleError, match=match):
        moe_dispatch(**args)
