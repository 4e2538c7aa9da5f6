"""The verifier: every error case names the chunk and the region and says what to change;
the ordering semantics of ``step`` and ``after`` (see syncopate/schedule/verify.py)."""

from __future__ import annotations

import importlib
from collections import Counter

import pytest

from syncopate.errors import ScheduleError
from syncopate.schedule import (Chunk, Placement, Region, Schedule, TensorSpec, all_gather,
                                all_reduce, analyze, verify)


def P(rank, offsets, sizes, partial=False):
    return Placement(rank, Region(offsets, sizes), partial)


def C(cid, src, dst, offsets, sizes, step=0, mode="push", reduce="none", after=(), tensor="A"):
    return Chunk(cid, tensor, Region(offsets, sizes), src, dst, mode, step, reduce, tuple(after))


def S(W, initial, final, chunks, shape=(6,), dtype="bf16", extra_tensors=()):
    tensors = {"A": TensorSpec("A", shape, dtype, initial, final)}
    for t in extra_tensors:
        tensors[t.name] = t
    return Schedule(W, tensors, chunks)


def problems(s) -> list[str]:
    with pytest.raises(ScheduleError) as e:
        verify(s)
    assert e.value.problems == analyze(s).problems
    return e.value.problems


def one(s) -> str:
    p = problems(s)
    assert len(p) == 1, p
    return p[0]


# Three ranks, A = [0, 6), rank r owns [2r, 2r + 2).
OWN = [P(0, [0], [2]), P(1, [2], [2]), P(2, [4], [2])]


def test_valid_forwarding_with_after():
    # 0 -> 1 at step 0, then 1 forwards to 2 at step 1 (after 0).
    s = S(3, OWN, [P(1, [0], [4]), P(2, [0], [2]), P(2, [4], [2])],
          [C(0, 0, 1, [0], [2]), C(1, 1, 2, [0], [2], step=1, after=[0])])
    verify(s)
    assert s.dependencies(1) == (0,)
    assert s.arrival_order(2, "A") == [Region((4,), (2,)), Region((0,), (2,))]


# --- structural errors ----------------------------------------------------------------------

def test_out_of_bounds_region():
    s = S(3, OWN, [P(1, [0], [4])], [C(0, 0, 1, [4], [4])])
    msg = problems(s)[0]
    assert msg == ("chunk 0 (A rank 0 -> 1, push, step 0, offsets [4] sizes [4]): region "
                   "offsets [4] sizes [4] is out of bounds of tensor A (shape [6]): dim 0 ends "
                   "at 8 > 6; make offsets[0] + sizes[0] <= 6")


def test_region_dims_mismatch():
    s = S(3, OWN, [], [C(0, 0, 1, [0, 0], [2, 1])])
    msg = one(s)
    assert "chunk 0 (" in msg and "offsets [0, 0] sizes [2, 1]" in msg
    assert "has 2 dims but tensor A has 1 (shape [6]); give one offset and one size per dim" in msg


def test_placement_out_of_bounds_and_unknown_rank():
    s = S(3, [P(0, [0], [7]), P(5, [0], [2])], [], [])
    p = problems(s)
    assert any("tensor A: initial[0] (rank 0, offsets [0] sizes [7])" in m and "out of bounds"
               in m for m in p)
    assert any("tensor A: initial[1] (rank 5, offsets [0] sizes [2]): rank 5 does not exist in "
               "a world of 3 ranks; use a rank in 0..2" in m for m in p)


def test_unknown_tensor():
    s = S(3, OWN, [], [C(0, 0, 1, [0], [2], tensor="B")])
    msg = one(s)
    assert msg.startswith("chunk 0 (B rank 0 -> 1, push, step 0, offsets [0] sizes [2]): "
                          "unknown tensor 'B'; the schedule has A")


def test_unknown_rank():
    s = S(3, OWN, [], [C(0, 0, 3, [0], [2])])
    msg = one(s)
    assert msg == ("chunk 0 (A rank 0 -> 3, push, step 0, offsets [0] sizes [2]): dst rank 3 "
                   "does not exist in a world of 3 ranks; use a rank in 0..2")


def test_src_equals_dst():
    msg = one(S(3, OWN, [], [C(0, 1, 1, [2], [2])]))
    assert "chunk 0 (A rank 1 -> 1" in msg and "offsets [2] sizes [2]" in msg
    assert "src == dst == 1" in msg


def test_duplicate_ids():
    s = S(3, OWN, [P(1, [0], [2])], [C(0, 0, 1, [0], [2]), C(0, 2, 1, [4], [2])])
    msg = one(s)
    assert msg.startswith("chunk id 0 is used by 2 chunks (chunk 0 (A rank 0 -> 1")
    assert "offsets [4] sizes [2]" in msg and "give every chunk its own id" in msg


def test_ids_must_be_dense():
    msg = one(S(3, OWN, [P(1, [0], [2])], [C(1, 0, 1, [0], [2])]))
    assert msg == ("chunk ids must be exactly 0..0 (they index the flag array): missing [0], "
                   "out of range [1]; renumber the chunks and their after lists")


def test_after_unknown_and_self():
    p = problems(S(3, OWN, [P(1, [0], [2])], [C(0, 0, 1, [0], [2], after=[0, 9])]))
    assert any("chunk 0 (A rank 0 -> 1" in m and "offsets [0] sizes [2]" in m
               and "dependency cycle: the chunk lists itself in after; remove 0" in m for m in p)
    assert any("after lists unknown chunk id 9" in m for m in p)


def test_overlapping_placements():
    s = S(3, [P(0, [0], [4]), P(0, [2], [4])], [], [])
    assert one(s) == ("tensor A: initial[0] and initial[1] of rank 0 overlap in offsets [2] "
                      "sizes [2]; a rank holds each element once: make the placements disjoint")


def test_final_partial():
    msg = one(S(3, OWN, [P(0, [0], [2], partial=True)], []))
    assert "tensor A: final[0] (rank 0, offsets [0] sizes [2]): a final placement cannot be " \
           "partial" in msg


def test_structural_errors_skip_execution_but_list_all():
    s = S(3, OWN, [P(1, [0], [6])],
          [C(0, 0, 1, [0], [9]), C(1, 0, 0, [0], [2]), C(2, 0, 7, [0], [2])])
    p = problems(s)
    assert len(p) == 3  # out of bounds, src == dst, unknown rank; no execution errors


# --- cycles ---------------------------------------------------------------------------------

def test_after_cycle_named():
    s = S(3, OWN, [P(1, [0], [2]), P(2, [2], [2])],
          [C(0, 0, 1, [0], [2], after=[1]), C(1, 1, 2, [2], [2], after=[0])])
    msg = one(s)
    assert msg.startswith("chunk 0 (A rank 0 -> 1, push, step 0, offsets [0] sizes [2]): "
                          "dependency cycle chunk 0 -> chunk 1 -> chunk 0")
    assert "chunk 1 lists 0 in after" in msg and "chunk 0 lists 1 in after" in msg
    assert "remove one of these after entries or change the steps" in msg


def test_cycle_through_step_rule():
    # Chunk 1 forwards what chunk 0 delivers (step rule: 0 before 1), but chunk 0 waits for 1.
    s = S(3, OWN, [P(1, [0], [2]), P(2, [0], [2])],
          [C(0, 0, 1, [0], [2], after=[1]), C(1, 1, 2, [0], [2], step=1)])
    msg = one(s)
    assert "dependency cycle chunk 0 -> chunk 1 -> chunk 0" in msg
    assert "chunk 0 arrives at rank 1 at step 0, before chunk 1 leaves it at step 1" in msg


def test_deadlock_against_program_order():
    # Rank 0 pushes chunk 0 (step 0) then chunk 1 (step 1); chunk 0 waits for chunk 2, which
    # waits for chunk 1: rank 0 would block on chunk 0 forever.
    s = S(3, OWN, [P(1, [0], [2]), P(2, [0], [2]), P(1, [4], [2])],
          [C(0, 0, 1, [0], [2], after=[2]), C(1, 0, 2, [0], [2], step=1),
           C(2, 2, 1, [4], [2], after=[1])])
    msg = one(s)
    assert "dependency cycle" in msg
    assert "rank 0 runs chunk 0 (step 0) before chunk 1 (step 1)" in msg


# --- execution errors -----------------------------------------------------------------------

def test_forward_data_never_held():
    s = S(3, OWN, [P(2, [0], [2])], [C(0, 1, 2, [0], [2])])
    msg = one(s)
    assert msg == ("chunk 0 (A rank 1 -> 2, push, step 0, offsets [0] sizes [2]): rank 1 does "
                   "not hold offsets [0] sizes [2] of A when the chunk reads it (it forwards "
                   "data its source does not hold yet); no chunk delivers it to rank 1 and rank "
                   "1 does not hold it initially: read it from a rank that holds it, or deliver "
                   "it to rank 1 first")


def test_forward_before_arrival_same_step_is_a_race():
    # Same step, no after: the forward may run before the data arrives.
    s = S(3, OWN, [P(1, [0], [4]), P(2, [0], [2]), P(2, [4], [2])],
          [C(0, 0, 1, [0], [2]), C(1, 1, 2, [0], [2], step=0)])
    msg = one(s)
    assert msg.startswith("chunk 1 (A rank 1 -> 2, push, step 0, offsets [0] sizes [2]): reads "
                          "offsets [0] sizes [2] of A on rank 1 while chunk 0 (A rank 0 -> 1")
    assert "neither is ordered before the other" in msg
    assert "give chunk 1 a step greater than chunk 0's (0) or add 0 to chunk 1's after" in msg


def test_forward_ordered_before_arrival():
    # after forces the forward (chunk 0) before the delivery (chunk 1): stale read.
    s = S(3, OWN, [P(2, [2], [2]), P(1, [4], [2]), P(2, [0], [2])],
          [C(0, 1, 2, [4], [2], step=0, mode="pull"),
           C(1, 2, 1, [4], [2], step=1, after=[0])])
    p = problems(s)
    assert any(m.startswith("chunk 0 (A rank 1 -> 2, pull, step 0, offsets [4] sizes [2]): "
                            "rank 1 does not hold offsets [4] sizes [2] of A") and
               "chunk 1 delivers it to rank 1 only after this chunk runs (step 1)" in m
               for m in p)


def test_double_delivery_of_initial_data():
    # Rank 1 owns [2, 4) already; a chunk delivering [0, 6) to it re-delivers that part.
    s = S(3, [P(0, [0], [6]), P(1, [2], [2])], [P(1, [0], [6])],
          [C(0, 0, 1, [0], [6])])
    msg = one(s)
    assert msg == ("chunk 0 (A rank 0 -> 1, push, step 0, offsets [0] sizes [6]): double "
                   "delivery: rank 1 already holds offsets [2] sizes [2] of A complete "
                   "(initially); drop the chunk or shrink its region to what rank 1 lacks")


def test_double_delivery_sequential_and_concurrent():
    init = [P(0, [0], [6]), P(2, [0], [6])]
    # Concurrent (same step, two sources): one message for the pair.
    s = S(3, init, [P(1, [0], [6])], [C(0, 0, 1, [0], [6]), C(1, 2, 1, [0], [3])])
    msg = one(s)
    assert msg.startswith("chunk 1 (A rank 2 -> 1, push, step 0, offsets [0] sizes [3]): double "
                          "delivery: it and chunk 0 (A rank 0 -> 1")
    assert "both deliver offsets [0] sizes [3] of A to rank 1" in msg
    # Sequential (after): the second finds the data there, "from chunk 0".
    s = S(3, init, [P(1, [0], [6])],
          [C(0, 0, 1, [0], [6]), C(1, 2, 1, [0], [3], after=[0])])
    msg = one(s)
    assert msg == ("chunk 1 (A rank 2 -> 1, push, step 0, offsets [0] sizes [3]): double "
                   "delivery: rank 1 already holds offsets [0] sizes [3] of A complete (from "
                   "chunk 0); drop the chunk or shrink its region to what rank 1 lacks")


def test_double_counting():
    part = [P(r, [0], [6], partial=True) for r in range(3)]
    # 0 adds into 1, then 1 forwards {0, 1} to 2, and 0 also adds directly into 2: {0} twice.
    s = S(3, part, [P(2, [0], [6])],
          [C(0, 0, 1, [0], [6], reduce="sum"), C(1, 1, 2, [0], [6], step=1, reduce="sum"),
           C(2, 0, 2, [0], [6], step=2, reduce="sum", after=[1])])
    msg = one(s)
    assert msg == ("chunk 2 (A rank 0 -> 2, push, sum, step 2, offsets [0] sizes [6]): double "
                   "counting: it adds contributions {0} into offsets [0] sizes [6] of A on rank "
                   "2, which already holds contributions {0, 1, 2}: the partials of ranks {0} "
                   "would be added twice; drop the chunk or send a region whose contributions "
                   "rank 2 does not hold yet")


def test_sum_into_nothing():
    msg = one(S(3, OWN, [P(1, [0], [4])], [C(0, 0, 1, [0], [2], reduce="sum")]))
    assert msg == ("chunk 0 (A rank 0 -> 1, push, sum, step 0, offsets [0] sizes [2]): adds "
                   "into offsets [0] sizes [2] of A on rank 1, which holds nothing there when "
                   "the chunk runs (no initial placement and no delivery ordered before it): the "
                   "sum would add to uninitialized memory; use reduce 'none' to copy, or give "
                   "rank 1 a partial initial placement there")


def test_copy_of_partial():
    part = [P(r, [0], [6], partial=True) for r in range(2)]
    s = S(2, part, [P(1, [0], [6])], [C(0, 0, 1, [0], [6])])
    msg = problems(s)[0]
    assert msg.startswith("chunk 0 (A rank 0 -> 1, push, step 0, offsets [0] sizes [6]): rank 0 "
                          "holds only the partial contributions {0} in offsets [0] sizes [6] of "
                          "A when the chunk reads it, but a copy (reduce 'none') needs the "
                          "complete value: use reduce 'sum'")


def test_final_not_met():
    s = S(3, OWN, [P(0, [0], [6])], [C(0, 1, 0, [2], [2])])
    msg = one(s)
    assert msg == ("tensor A: final placement not met: rank 0 must end with offsets [0] sizes "
                   "[6] complete (final[0]) but lacks offsets [4] sizes [2] (it holds nothing "
                   "there); add chunks that deliver the complete value to rank 0, or remove the "
                   "region from its final placement")


def test_final_not_met_partial_and_coalesced():
    part = [P(r, [0], [6], partial=True) for r in range(3)]
    s = S(3, part, [P(2, [0], [6])],
          [C(0, 0, 2, [0], [3], reduce="sum"), C(1, 0, 2, [3], [3], reduce="sum", step=1),
           C(2, 1, 2, [0], [6], reduce="sum")])
    verify(s)
    s = S(3, part, [P(2, [0], [6])],
          [C(0, 0, 2, [0], [3], reduce="sum"), C(1, 0, 2, [3], [3], reduce="sum", step=1)])
    msg = one(s)
    # The two pieces holding the same set are reported as one region.
    assert "lacks offsets [0] sizes [6] (it holds only the partial contributions {0, 2} " \
           "there)" in msg


def test_dead_delivery():
    s = S(3, OWN, [P(1, [2], [2])], [C(0, 0, 1, [0], [2])])
    assert one(s) == ("chunk 0 (A rank 0 -> 1, push, step 0, offsets [0] sizes [2]): delivers "
                      "offsets [0] sizes [2] to rank 1, which neither keeps it (not in rank 1's "
                      "final placement of A) nor forwards it (no chunk ordered after this one "
                      "reads it from rank 1); drop the chunk, shrink its region, or add the "
                      "region to rank 1's final placement")


def test_copy_and_sum_race_on_destination():
    init = [P(0, [0], [6]), P(1, [0], [6], partial=True), P(2, [0], [6], partial=True)]
    s = S(3, init, [P(1, [0], [6])],
          [C(0, 0, 1, [0], [6]), C(1, 2, 1, [0], [6], reduce="sum")])
    p = problems(s)
    assert any(m.startswith("chunk 1 (A rank 2 -> 1, push, sum, step 0, offsets [0] sizes [6]): "
                            "writes offsets [0] sizes [6] of A on rank 1 concurrently with "
                            "chunk 0") for m in p)


def test_write_after_read_race():
    # Rank 1 sends its partial to 2 (step 0) while rank 0 overwrites it (step 0, concurrent).
    init = [P(0, [0], [6]), P(1, [0], [6], partial=True), P(2, [0], [6], partial=True)]
    s = S(3, init, [P(1, [0], [6]), P(2, [0], [6])],
          [C(0, 0, 1, [0], [6]), C(1, 1, 2, [0], [6], reduce="sum")])
    p = problems(s)
    assert any(m.startswith("chunk 1 (A rank 1 -> 2, push, sum, step 0, offsets [0] sizes [6]): "
                            "reads offsets [0] sizes [6] of A on rank 1 while chunk 0") and
               "add 1 to chunk 0's after to read before chunk 0 overwrites it" in m for m in p)


def test_all_problems_listed():
    s = S(3, OWN, [P(0, [0], [6]), P(1, [0], [6])],
          [C(0, 1, 0, [2], [2]), C(1, 1, 0, [2], [2], step=1, after=[0]),
           C(2, 2, 1, [0], [2])])
    p = problems(s)
    assert any("double delivery" in m and m.startswith("chunk 1 ") for m in p)
    assert any(m.startswith("chunk 2 ") and "rank 2 does not hold" in m for m in p)
    assert any("final placement not met: rank 0" in m for m in p)
    assert any("final placement not met: rank 1" in m for m in p)
    assert len(p) >= 4


# --- ordering semantics ---------------------------------------------------------------------

def test_step_rule_orders_forwarding_without_after():
    # The forward at a higher step needs no after: "a rank forwards at step s what arrived
    # before step s".
    s = S(3, OWN, [P(1, [0], [4]), P(2, [0], [2]), P(2, [4], [2])],
          [C(0, 0, 1, [0], [2]), C(1, 1, 2, [0], [2], step=1)])
    verify(s)
    assert s.dependencies(1) == (0,)
    assert analyze(s).happens_before(0, 1)


def test_step_rule_only_links_overlapping_regions():
    s = S(3, OWN, [P(1, [0], [4]), P(2, [2], [2]), P(2, [4], [2])],
          [C(0, 0, 1, [0], [2]), C(1, 1, 2, [2], [2], step=1)])
    verify(s)
    assert s.dependencies(1) == ()  # rank 1 sends its own block: no wait on chunk 0


def test_step_rule_only_on_the_source_rank():
    # Chunk 1 leaves rank 2 at step 5 but chunk 0 arrived at rank 1: steps of different ranks
    # are not compared, so reading [0, 2) from rank 2 is not ordered and rank 2 lacks it.
    s = S(3, OWN, [P(1, [0], [4]), P(0, [4], [2])],
          [C(0, 0, 1, [0], [2]), C(1, 2, 0, [0], [2], step=5)])
    assert any("rank 2 does not hold offsets [0] sizes [2]" in m for m in problems(s))


def test_after_orders_across_ranks_regardless_of_steps():
    # The forward has a *lower* step than the delivery but lists it in after: steps are local,
    # after is a real dependency, and no executing rank runs them against program order.
    s = S(3, OWN, [P(1, [0], [4]), P(2, [0], [2]), P(2, [4], [2])],
          [C(0, 0, 1, [0], [2], step=3), C(1, 1, 2, [0], [2], step=0, after=[0])])
    verify(s)
    assert s.dependencies(1) == (0,)


def test_same_step_concurrent_sums_commute():
    part = [P(r, [0], [6], partial=True) for r in range(3)]
    s = S(3, part, [P(0, [0], [6])],
          [C(0, 1, 0, [0], [6], reduce="sum"), C(1, 2, 0, [0], [6], reduce="sum")])
    verify(s)
    assert s.arrival_order(0, "A") == [Region((0,), (6,))]


def test_transitive_order_through_a_chain():
    # Happens-before is transitive: in a 4-rank ring, block 0 hops 0 -> 1 -> 2 -> 3 and its
    # first hop precedes its last although they share no rank.
    ring = all_gather((8,), "bf16", 4, order="ring")
    ar = analyze(ring)
    # Block 0's hops: 0 -> 1 -> 2 -> 3; the first precedes the last transitively.
    hops = [c.id for c in ring.ordered_chunks() if c.region == Region((0,), (2,))]
    assert ar.happens_before(hops[0], hops[-1])


def test_multiple_tensors_do_not_interact():
    b = TensorSpec("B", (6,), "fp32", [P(0, [0], [2])], [P(1, [0], [2])])
    s = S(3, OWN, [P(1, [0], [4])], [C(0, 0, 1, [0], [2]), C(1, 0, 1, [0], [2], tensor="B")],
          extra_tensors=[b])
    verify(s)
    assert s.arrival_order(1, "B") == [Region((0,), (2,))]


@pytest.mark.parametrize("make", [
    lambda: all_reduce((8192, 4096), "bf16", 8, order="ring", split=4),  # 448 chunks
    lambda: all_gather((8192, 4096), "bf16", 8, split=9),  # 504 chunks
])
def test_work_grows_with_the_chunks_that_meet_on_a_rank(make, monkeypatch):
    """What keeps 8 ranks x 64 chunks fast, counted instead of timed: one update of the box
    maps per chunk, a few box queries per chunk, and overlap tests only between chunks that
    meet on a rank (written there, or written and read there) -- never between all pairs."""
    V = importlib.import_module("syncopate.schedule.verify")
    calls = {"overlap": 0, "update": 0, "query": 0}

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper
    monkeypatch.setattr(V, "boxes_overlap", counted("overlap", V.boxes_overlap))
    monkeypatch.setattr(V, "_update", counted("update", V._update))
    monkeypatch.setattr(V, "_query", counted("query", V._query))
    s = make()
    verify(s)
    n = len(s.chunks)
    incoming, outgoing = Counter((c.dst, c.tensor) for c in s.chunks), \
        Counter((c.src, c.tensor) for c in s.chunks)
    meet = sum(k * (k + outgoing[key]) for key, k in incoming.items())
    assert calls["update"] == n and 0 < calls["query"] <= 4 * n
    assert 0 < calls["overlap"] <= meet < n * n // 3, (calls, meet, n)


@pytest.mark.parametrize("index, outside", [(0, False), (1, False), (2, True), (-1, True)])
def test_a_valid_rows_index_must_lie_inside_the_count_tensor(index, outside):
    """A run-time extent's count is ``CNT[index]`` of a 2-element CNT: 0 and 1 are counts,
    2 (one past the end) and -1 are not -- the boundary cases (the schedule of
    tests/test_schedule_moe.py)."""
    from test_schedule_moe import _count, _data, _rest, _sched
    s = _sched([_count(0, 0, 1, n=2), _data(1, 0, 1, 0, {"tensor": "CNT", "index": index})]
               + _rest(2))
    problems = analyze(s).problems
    assert any("outside CNT" in p for p in problems) == outside, problems


def test_every_problem_of_every_extent_is_reported():
    """Two chunks whose count tensor is not int32: one problem each (the verifier lists every
    problem; it does not stop at the first chunk)."""
    from test_schedule_moe import _count, _data, _sched
    vr = {"tensor": "CNT", "index": 0}
    s = _sched([_count(0, 0, 1), _data(1, 0, 1, 0, vr), _data(2, 1, 0, 4, vr),
                _data(3, 1, 0, 6, None), _data(4, 0, 1, 2, None)], dtype="fp32")
    problems = analyze(s).problems
    assert sum("must be 1-d int32" in p for p in problems) == 2, problems


def test_each_copy_completes_the_region_it_delivers():
    """``completed`` (what the cost model's arrival events read): a copy into a rank that
    lacked its region completes exactly that region there."""
    s = all_gather((8, 4), "bf16", 2, split=2)
    ar = analyze(s)
    for c in s.chunks:
        assert ar.completed[c.id] == [c.region], (c, ar.completed[c.id])
