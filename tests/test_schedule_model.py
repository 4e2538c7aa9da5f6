"""Unit tests of the schedule data model: regions, construction checks, schedule helpers."""

from __future__ import annotations

import pickle

import pytest

from syncopate.errors import ScheduleError
from syncopate.schedule import (Chunk, Placement, Region, Schedule, TensorSpec, all_gather,
                                all_reduce, dtype_size, normalize_dtype, reduce_scatter)
from syncopate.schedule.model import box_difference, coalesce_boxes, even_split


# --- Region ---------------------------------------------------------------------------------

def test_region_geometry():
    r = Region((2, 0), (4, 8))
    assert r.ndim == 2 and r.stops == (6, 8) and r.volume == 32 and not r.is_empty
    assert r.slices() == (slice(2, 6), slice(0, 8))
    assert str(r) == "offsets [2, 0] sizes [4, 8]"
    assert r.brief() == "[2:6, 0:8]"
    assert Region.full((3, 5)) == Region((0, 0), (3, 5))
    assert Region.from_bounds((1, 2), (3, 5)) == Region((1, 2), (2, 3))
    assert Region([1, 2], [3, 4]).offsets == (1, 2)  # lists become tuples
    assert hash(Region([1], [2])) == hash(Region((1,), (2,)))


def test_region_set_ops():
    a = Region((0, 0), (4, 4))
    b = Region((2, 2), (4, 4))
    assert a.intersection(b) == Region((2, 2), (2, 2))
    assert a.overlaps(b) and not a.disjoint(b)
    assert a.intersection(Region((4, 0), (1, 4))) is None  # touching is not overlapping
    assert a.disjoint(Region((4, 0), (1, 4)))
    assert a.contains(Region((1, 1), (2, 2))) and not a.contains(b)
    parts = a.subtract(b)
    assert sum(p.volume for p in parts) == a.volume - 4
    assert all(p.disjoint(q) for i, p in enumerate(parts) for q in parts[i + 1:])
    assert all(p.disjoint(b) and a.contains(p) for p in parts)
    assert a.subtract(Region((10, 10), (1, 1))) == [a]
    assert a.subtract(a) == []
    assert a.covered_by([Region((0, 0), (2, 4)), Region((2, 0), (2, 4))])
    assert not a.covered_by([Region((0, 0), (2, 4))])
    assert a.difference([Region((0, 0), (2, 4))]) == [Region((2, 0), (2, 4))]
    assert a.within((4, 4)) and not a.within((3, 4)) and not a.within((4, 4, 1))


def test_region_split_even_and_ragged():
    r = Region((10, 0), (7, 3))
    parts = r.split(0, 3)
    assert [p.sizes[0] for p in parts] == [3, 2, 2]
    assert [p.offsets[0] for p in parts] == [10, 13, 15]
    assert r.split(0, 10) == [Region((10 + i, 0), (1, 3)) for i in range(7)]  # empties dropped
    assert even_split(5, 2) == [(0, 3), (3, 2)]


def test_region_rejects_bad_input():
    with pytest.raises(ScheduleError, match="offsets .* has 2 entries but sizes .* has 1"):
        Region((0, 0), (4,))
    with pytest.raises(ScheduleError, match=r"sizes\[0\] must be >= 0"):
        Region((0,), (-1,))
    with pytest.raises(ScheduleError, match="must be an integer"):
        Region((0.5,), (1,))
    with pytest.raises(ScheduleError, match="must be an integer"):
        Region((True,), (1,))
    with pytest.raises(ScheduleError, match="at least one dim"):
        Region((), ())
    with pytest.raises(ScheduleError, match="different numbers of dims"):
        Region((0,), (1,)).overlaps(Region((0, 0), (1, 1)))


def test_box_helpers():
    target = ((0, 0), (4, 4))
    assert box_difference(target, [target]) == []
    rest = box_difference(target, [((0, 0), (2, 4))])
    assert rest == [((2, 0), (4, 4))]
    merged = coalesce_boxes([((0, 0), (2, 4)), ((2, 0), (4, 4)), ((4, 0), (5, 3))])
    assert ((0, 0), (4, 4)) in merged and len(merged) == 2


# --- dtypes ---------------------------------------------------------------------------------

def test_dtypes():
    assert dtype_size("bf16") == 2 and dtype_size("fp8e4m3") == 1 and dtype_size("int32") == 4
    assert normalize_dtype("torch.bfloat16") == "bf16"
    assert normalize_dtype("*fp8e4nv") == "fp8e4m3"
    assert normalize_dtype("float32") == "fp32"
    assert normalize_dtype("i32") == "int32"
    with pytest.raises(ScheduleError, match="unknown dtype 'bf17'; use one of bf16"):
        normalize_dtype("bf17")
    t = TensorSpec("A", (4,), "bfloat16")
    assert t.dtype == "bf16" and t.elem_size == 2 and t.nbytes == 8
    with pytest.raises(ScheduleError, match="tensor 'A': unknown dtype"):
        TensorSpec("A", (4,), "float128")


# --- construction checks --------------------------------------------------------------------

def test_object_construction_checks():
    r = Region((0,), (4,))
    with pytest.raises(ScheduleError, match="empty; leave the placement out"):
        Placement(0, Region((0,), (0,)))
    with pytest.raises(ScheduleError, match="partial must be true or false"):
        Placement(0, r, partial="yes")
    with pytest.raises(ScheduleError, match="chunk 3: region .* is empty"):
        Chunk(3, "A", Region((0,), (0,)), 0, 1)
    with pytest.raises(ScheduleError, match="mode must be 'push' or 'pull', got 'send'"):
        Chunk(0, "A", r, 0, 1, mode="send")
    with pytest.raises(ScheduleError, match="reduce must be 'none' or 'sum', got 'max'"):
        Chunk(0, "A", r, 0, 1, reduce="max")
    with pytest.raises(ScheduleError, match=r"after\[1\] must be an integer"):
        Chunk(0, "A", r, 0, 1, after=(1, "x"))
    with pytest.raises(ScheduleError, match="shape.* must be >= 1"):
        TensorSpec("A", (0, 4), "bf16")
    with pytest.raises(ScheduleError, match=r"initial\[0\] must be a Placement"):
        TensorSpec("A", (4,), "bf16", initial=[{"rank": 0}])
    with pytest.raises(ScheduleError, match="world_size must be >= 1"):
        Schedule(0, {}, [])
    spec = TensorSpec("A", (4,), "bf16")
    with pytest.raises(ScheduleError, match="is named 'A'; use the same name"):
        Schedule(2, {"B": spec}, [])
    with pytest.raises(ScheduleError, match="meta key 'version' is reserved"):
        Schedule(2, {"A": spec}, [], {"version": 3})
    # Regions given as (offsets, sizes) pairs or dicts are accepted.
    c = Chunk(0, "A", ((0,), (2,)), 0, 1)
    assert c.region == Region((0,), (2,))
    assert Placement(1, {"offsets": [0], "sizes": [2]}).region == Region((0,), (2,))
    # Schedules accept a list of TensorSpec too.
    assert Schedule(1, [spec], []).tensors == {"A": spec}


def test_chunk_helpers():
    c = Chunk(7, "A", Region((4, 0), (4, 4)), 1, 0, mode="pull", step=2, reduce="sum")
    assert c.executor == 0 and c.peer(0) == 1 and c.peer(1) == 0
    assert Chunk(0, "A", Region((0,), (1,)), 1, 0).executor == 1
    assert c.describe() == "chunk 7 (A rank 1 -> 0, pull, sum, step 2, offsets [4, 0] sizes [4, 4])"
    with pytest.raises(ValueError):
        c.peer(3)


# --- schedule helpers -----------------------------------------------------------------------

def test_chunks_to_from_sorted():
    s = all_gather((8, 2), "bf16", 4, split=2)
    for r in range(4):
        to = s.chunks_to(r)
        assert [c.dst for c in to] == [r] * 6
        assert [(c.step, c.id) for c in to] == sorted((c.step, c.id) for c in to)
        assert all(c.src == r for c in s.chunks_from(r))
        # who runs a chunk depends on the backend too: schedule.execution, not the model
        assert not hasattr(s, "chunks_executed_by")
    assert s.ordered_chunks() == sorted(s.chunks, key=lambda c: (c.step, c.id))
    assert s.num_chunks == 24 and s.chunk(5).id == 5
    with pytest.raises(ScheduleError, match="no chunk with id 99"):
        s.chunk(99)
    assert s.chunk_bytes(0) == 1 * 2 * 2 and s.total_bytes == 24 * 4
    with pytest.raises(ScheduleError, match="no tensor 'B'"):
        s.tensor("B")


def test_arrival_order_all_gather():
    s = all_gather((8, 2), "bf16", 4, split=1)
    # Rank 1: its own block first, then blocks 2, 3, 0 (swizzle: (r + s + 1) % W).
    assert s.arrival_order(1, "A") == [Region((2, 0), (2, 2)), Region((4, 0), (2, 2)),
                                       Region((6, 0), (2, 2)), Region((0, 0), (2, 2))]
    ring = all_gather((8, 2), "bf16", 4, order="ring")
    # Ring: rank 1 receives (1 - s - 1) % 4 = 0, 3, 2.
    assert ring.arrival_order(1, "A") == [Region((2, 0), (2, 2)), Region((0, 0), (2, 2)),
                                          Region((6, 0), (2, 2)), Region((4, 0), (2, 2))]


def test_arrival_order_reduce_scatter_counts_completion_only():
    s = reduce_scatter((8, 2), "fp32", 4, order="ring")
    for r in range(4):
        # Partials are not "available": only the final hop completes block r.
        assert s.arrival_order(r, "C") == [Region((2 * r, 0), (2, 2))]
    sw = reduce_scatter((8, 2), "fp32", 4, order="swizzle", split=2)
    assert sw.arrival_order(0, "C") == [Region((0, 0), (1, 2)), Region((1, 0), (1, 2))]
    # Departure order: rank 0 sends blocks 1, 2, 3 in steps 0.., two pieces each, and needs its
    # own block's pieces as early as the chunks that reduce into it (steps 0 and 1).
    assert sw.departure_order(0, "C")[:4] == [Region((2, 0), (1, 2)), Region((0, 0), (1, 2)),
                                              Region((3, 0), (1, 2)), Region((1, 0), (1, 2))]


def test_dependencies_combine_after_and_step_rule():
    ring = all_gather((8, 2), "bf16", 4, order="ring")
    for c in ring.chunks:
        assert set(c.after) <= set(ring.dependencies(c.id))
    # First hops read from the owner: nothing to wait for.
    assert all(ring.dependencies(c.id) == () for c in ring.chunks if c.step == 0)
    ar = all_reduce((8, 2), "bf16", 2)
    ag_first = [c for c in ar.chunks if c.reduce == "none"]
    rs = [c for c in ar.chunks if c.reduce == "sum"]
    for c in ag_first:
        # The all-gather chunk reading block d from d waits for the sum into d.
        assert ar.dependencies(c.id) == tuple(x.id for x in rs if x.dst == c.src)


def test_helpers_raise_on_invalid_schedule():
    spec = TensorSpec("A", (4,), "bf16", [Placement(0, Region((0,), (4,)))],
                      [Placement(1, Region((0,), (4,)))])
    s = Schedule(2, {"A": spec}, [])
    with pytest.raises(ScheduleError, match="final placement not met"):
        s.arrival_order(1, "A")
    with pytest.raises(ScheduleError, match="final placement not met"):
        s.verify()


def test_content_hash_stable_and_sensitive():
    a = all_gather((64, 8), "bf16", 2, split=2)
    b = all_gather((64, 8), "bf16", 2, split=2)
    assert a == b and a.content_hash() == b.content_hash() and hash(a) == hash(b)
    # Chunk order in the list does not matter, content does.
    shuffled = Schedule(a.world_size, a.tensors, list(reversed(a.chunks)), a.meta)
    assert shuffled.content_hash() == a.content_hash()
    assert all_gather((64, 8), "bf16", 2, split=4).content_hash() != a.content_hash()
    assert all_gather((64, 8), "fp16", 2, split=2).content_hash() != a.content_hash()
    assert len(a.content_hash()) == 64
    # Known digest: changes only when the canonical JSON (the format) changes.
    assert a.content_hash() == all_gather((64, 8), "bfloat16", 2, split=2).content_hash()


def test_pickle_round_trip_drops_caches():
    s = all_gather((16, 4), "bf16", 2)
    s.verify()  # fills the cached analysis
    t = pickle.loads(pickle.dumps(s))
    assert t == s and "_analysis" not in t.__dict__
    assert t.arrival_order(0, "A") == s.arrival_order(0, "A")


def test_frozen():
    s = all_gather((16, 4), "bf16", 2)
    with pytest.raises(Exception):
        s.world_size = 3
    with pytest.raises(Exception):
        s.chunks[0].src = 1


def test_schedule_package_is_pure_python():
    # Every layer imports the schedule package; it must not drag in Triton, torch or xDSL.
    import subprocess
    import sys
    code = ("import sys, syncopate.schedule, syncopate.schedule_cli; "
            "bad = [m for m in ('torch', 'triton', 'xdsl', 'numpy') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
