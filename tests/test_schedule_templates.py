"""Templates: their structure, that every one verifies (property-based, random and ragged
shapes, 2..8 ranks, splits 1..4, every order and mode), and that mutated schedules are
rejected by the verifier."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from syncopate.errors import ScheduleError
from syncopate.schedule import (TEMPLATES, Chunk, Region, Schedule, all_gather, all_reduce,
                                all_to_all, analyze, reduce_scatter, ring_pass, verify)

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# --- structure ------------------------------------------------------------------------------

def test_all_gather_swizzle_structure():
    W = 4
    s = all_gather((8, 3), "bf16", W, mode="pull")
    verify(s)
    assert [c.id for c in s.chunks] == list(range(12))
    for c in s.chunks:
        # At step s rank r receives block (r + s + 1) % W straight from its owner.
        assert c.src == (c.dst + c.step + 1) % W
        assert c.region == Region((2 * c.src, 0), (2, 3))
        assert c.mode == "pull" and c.reduce == "none" and c.after == ()
    assert s.meta == {"template": {"name": "all_gather", "shape": [8, 3], "dtype": "bf16",
                                   "world_size": 4, "dim": 0, "order": "swizzle",
                                   "mode": "pull", "split": 1, "tensor": "A"}}


def test_all_gather_ring_structure():
    W = 4
    s = all_gather((8,), "fp32", W, order="ring", mode="push")
    verify(s)
    by_id = {c.id: c for c in s.chunks}
    for c in s.chunks:
        assert c.src == (c.dst - 1) % W
        owner = (c.dst - c.step - 1) % W
        assert c.region == Region((2 * owner,), (2,))
        if c.step == 0:
            assert c.after == ()
        else:
            (prev,) = c.after
            # It forwards what its source received at the previous step.
            assert by_id[prev].dst == c.src and by_id[prev].region == c.region
            assert by_id[prev].step == c.step - 1


def test_split_is_ragged_and_ordered():
    s = all_gather((11, 2), "bf16", 2, split=3)  # blocks of 6 and 5 rows
    verify(s)
    to0 = s.chunks_to(0)
    assert [c.region.sizes[0] for c in to0] == [2, 2, 1]
    assert [c.region.offsets[0] for c in to0] == [6, 8, 10]
    assert [c.step for c in to0] == [0, 1, 2]
    to1 = s.chunks_to(1)
    assert [c.region.sizes[0] for c in to1] == [2, 2, 2]
    # More pieces than rows: empty pieces are left out, steps keep their slots.
    tiny = all_gather((3,), "bf16", 2, split=4)
    verify(tiny)
    assert [c.region.sizes[0] for c in tiny.chunks_to(0)] == [1]
    assert [c.region.sizes[0] for c in tiny.chunks_to(1)] == [1, 1]


def test_fewer_rows_than_ranks():
    s = all_gather((3, 2), "bf16", 5)  # ranks 3 and 4 own nothing
    verify(s)
    assert [p.rank for p in s.tensors["A"].initial] == [0, 1, 2]
    assert all(c.src in (0, 1, 2) for c in s.chunks)
    rs = reduce_scatter((3, 2), "bf16", 5)
    verify(rs)
    assert [p.rank for p in rs.tensors["C"].final] == [0, 1, 2]


def test_reduce_scatter_structure():
    W = 3
    s = reduce_scatter((6, 4), "bf16", W)
    verify(s)
    assert all(p.partial for p in s.tensors["C"].initial)
    for c in s.chunks:
        assert c.reduce == "sum" and c.mode == "push"
        assert c.dst == (c.src + c.step + 1) % W
        assert c.region == Region((2 * c.dst, 0), (2, 4))
    ring = reduce_scatter((6, 4), "bf16", W, order="ring")
    verify(ring)
    for c in ring.chunks:
        assert c.dst == (c.src + 1) % W
        assert bool(c.after) == (c.step > 0)
    # The last hop of block x lands on x.
    last = [c for c in ring.chunks if c.step == W - 2]
    assert all(c.region == Region((2 * c.dst, 0), (2, 4)) for c in last)


def test_all_reduce_structure():
    W = 3
    s = all_reduce((6,), "fp32", W, split=2)
    verify(s)
    rs = [c for c in s.chunks if c.reduce == "sum"]
    ag = [c for c in s.chunks if c.reduce == "none"]
    assert len(rs) == len(ag) == W * (W - 1) * 2
    assert max(c.step for c in rs) < min(c.step for c in ag)
    assert all(c.after for c in ag)  # waits for the sums that complete its piece
    for r in range(W):
        assert s.arrival_order(r, "C")[0] == Region((2 * r,), (1,))


def test_all_to_all_structure():
    W = 2
    s = all_to_all((4, 6), "bf16", W, split_dim=0, concat_dim=1)
    verify(s)
    t = s.tensors["A"]
    assert [p.region for p in t.initial] == [Region((0, 0), (2, 6)), Region((2, 0), (2, 6))]
    assert [p.region for p in t.final] == [Region((0, 0), (4, 3)), Region((0, 3), (4, 3))]
    assert {(c.src, c.dst, c.region) for c in s.chunks} == {
        (1, 0, Region((2, 0), (2, 3))), (0, 1, Region((0, 3), (2, 3)))}


def test_ring_pass_structure():
    s = ring_pass((16, 8), "bf16", 4)
    verify(s)
    assert s.meta["template"]["name"] == "ring_pass"
    assert {c.mode for c in s.chunks} == {"push"}
    assert all(c.src == (c.dst - 1) % 4 for c in s.chunks)
    # Rank 2 sees KV blocks 2, 1, 0, 3: its own, then one hop further back per step.
    assert [r.offsets[0] // 4 for r in s.arrival_order(2, "KV")] == [2, 1, 0, 3]


def test_world_size_one():
    for name in ("all_gather", "reduce_scatter", "all_reduce", "ring_pass"):
        s = TEMPLATES[name]((4, 2), "bf16", 1)
        verify(s)
        assert s.chunks == ()


@pytest.mark.parametrize("call, match", [
    (lambda: all_gather((8,), "bf16", 2, split=0), "all_gather: split must be an integer >= 1"),
    (lambda: all_gather((8,), "bf16", 2, dim=1), r"all_gather: dim must be a dim of shape \[8\]"),
    (lambda: all_gather((8,), "bf16", 2, order="tree"), "order must be one of 'swizzle', 'ring'"),
    (lambda: all_gather((8,), "bf16", 2, mode="send"), "mode must be 'push' or 'pull'"),
    (lambda: all_gather((8,), "bf16", 0), "world_size must be an integer >= 1"),
    (lambda: all_gather((0, 8), "bf16", 2), "must have positive sizes"),
    (lambda: all_gather((8,), "bf17", 2), "unknown dtype"),
    (lambda: all_to_all((8, 8), "bf16", 2, 1, 1), "split_dim and concat_dim are both 1"),
    (lambda: all_to_all((8, 8), "bf16", 2, 0, 1, order="ring"), "order must be one of 'swizzle'"),
])
def test_template_argument_errors(call, match):
    with pytest.raises(ScheduleError, match=match):
        call()


def test_negative_dim():
    assert all_gather((4, 6), "bf16", 2, dim=-1) == all_gather((4, 6), "bf16", 2, dim=1)


# --- property: every template verifies ------------------------------------------------------

@st.composite
def template_cases(draw, names=tuple(TEMPLATES)):
    name = draw(st.sampled_from(names))
    world = draw(st.integers(2, 8))
    ndim = draw(st.integers(2 if name == "all_to_all" else 1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(["bf16", "fp32", "fp8e4m3"]))
    kwargs = {"mode": draw(st.sampled_from(["push", "pull"])),
              "split": draw(st.integers(1, 4))}
    if name == "all_to_all":
        sd, cd = draw(st.permutations(range(ndim)))[:2]
        kwargs.update(split_dim=sd, concat_dim=cd)
    else:
        kwargs["dim"] = draw(st.integers(0, ndim - 1))
        if name != "ring_pass":
            kwargs["order"] = draw(st.sampled_from(["swizzle", "ring"]))
    return TEMPLATES[name](shape, dtype, world, **kwargs)


@SETTINGS
@given(template_cases())
def test_every_template_verifies(s: Schedule):
    verify(s)
    assert [c.id for c in s.chunks] == list(range(s.num_chunks))
    name = s.meta["template"]["name"]
    for tname in s.tensors:  # kv_all_gather moves two tensors, every other template one
        _check_template_tensor(s, name, tname)


def _check_template_tensor(s: Schedule, name: str, tname: str) -> None:
    t = s.tensors[tname]
    total = t.full_region.volume
    for r in range(s.world_size):
        final_volume = sum(p.region.volume for p in t.final if p.rank == r)
        arrived = s.arrival_order(r, tname)
        # What becomes available covers the final placement exactly once (all-to-all also
        # keeps the initial block outside its final placement).
        if name != "all_to_all":
            assert sum(x.volume for x in arrived) == final_volume
        if name in ("all_gather", "ring_pass", "all_reduce", "kv_all_gather"):
            assert final_volume == total
        if name in ("all_gather", "ring_pass", "all_to_all", "kv_all_gather"):
            # Copies: initial data first, then every incoming chunk's region by (step, id).
            n_init = sum(1 for p in t.initial if p.rank == r)
            assert arrived[n_init:] == [c.region for c in s.chunks_to(r) if c.tensor == tname]
    # Every split piece has sizes within one of its siblings: chunks as even as possible.
    if name in ("all_gather", "ring_pass", "kv_all_gather"):
        dim = s.meta["template"]["dim"]
        for r in range(s.world_size):
            sizes = [c.region.sizes[dim] for c in s.chunks_from(r) if c.dst == (r + 1) % s.world_size]
            if sizes:
                assert max(sizes) - min(sizes) <= 1


# --- property: mutations are rejected -------------------------------------------------------

def _replace(s: Schedule, chunks) -> Schedule:
    return dataclasses.replace(s, chunks=tuple(chunks))


def _renumber(chunks: list[Chunk]) -> list[Chunk]:
    ids = {c.id: i for i, c in enumerate(chunks)}
    return [dataclasses.replace(c, id=ids[c.id], after=tuple(ids[a] for a in c.after if a in ids))
            for c in chunks]


def _rejected(s: Schedule) -> list[str]:
    with pytest.raises(ScheduleError) as e:
        verify(s)
    return e.value.problems


MUTATION_SETTINGS = settings(max_examples=60, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


@MUTATION_SETTINGS
@given(template_cases(), st.data())
def test_dropping_a_chunk_is_rejected(s, data):
    assume(s.chunks)
    i = data.draw(st.integers(0, s.num_chunks - 1))
    chunks = list(s.chunks)
    dropped = chunks.pop(i)
    problems = _rejected(_replace(s, _renumber(chunks)))
    assert problems  # the dropped region is missing somewhere, named by rank and region
    assert any("final placement not met" in p or "does not hold" in p for p in problems), \
        (dropped, problems)


@MUTATION_SETTINGS
@given(template_cases(), st.data())
def test_duplicating_a_chunk_is_rejected(s, data):
    assume(s.chunks)
    c = s.chunks[data.draw(st.integers(0, s.num_chunks - 1))]
    # With a fresh id: the data arrives twice (double delivery or double counting).
    problems = _rejected(_replace(s, list(s.chunks) + [dataclasses.replace(c, id=s.num_chunks)]))
    assert any(("double delivery" in p or "double counting" in p)
               and (f"chunk {s.num_chunks} " in p or f"chunk {c.id} " in p)
               for p in problems), problems
    # With the same id: a structural error.
    problems = _rejected(_replace(s, list(s.chunks) + [c]))
    assert any(f"chunk id {c.id} is used by 2 chunks" in p for p in problems)


@MUTATION_SETTINGS
@given(template_cases(), st.data())
def test_swapping_src_and_dst_is_rejected(s, data):
    assume(s.chunks)
    i = data.draw(st.integers(0, s.num_chunks - 1))
    chunks = list(s.chunks)
    chunks[i] = dataclasses.replace(chunks[i], src=chunks[i].dst, dst=chunks[i].src)
    assert _rejected(_replace(s, chunks))


@MUTATION_SETTINGS
@given(template_cases(), st.data())
def test_region_out_of_bounds_is_rejected(s, data):
    assume(s.chunks)
    i = data.draw(st.integers(0, s.num_chunks - 1))
    c = s.chunks[i]
    shape = s.tensors[c.tensor].shape
    d = data.draw(st.integers(0, len(shape) - 1))
    offsets = list(c.region.offsets)
    offsets[d] = shape[d] - c.region.sizes[d] + data.draw(st.integers(1, 5))
    chunks = list(s.chunks)
    chunks[i] = dataclasses.replace(c, region=Region(offsets, c.region.sizes))
    problems = _rejected(_replace(s, chunks))
    assert any(p.startswith(f"chunk {c.id} (") and "is out of bounds of tensor" in p
               and f"dim {d} ends at" in p for p in problems), problems


@MUTATION_SETTINGS
@given(template_cases(), st.data())
def test_forwarding_before_arrival_is_rejected(s, data):
    # Pick a chunk that forwards data (it has dependencies), drop its after and give it the
    # step of the chunk that delivers that data: it may now run before the data arrives.
    forwarding = [c for c in s.chunks if s.dependencies(c.id)]
    assume(forwarding)
    c = forwarding[data.draw(st.integers(0, len(forwarding) - 1))]
    delivering = s.chunk(data.draw(st.sampled_from(s.dependencies(c.id))))
    step = data.draw(st.integers(0, delivering.step))
    chunks = [dataclasses.replace(x, step=step, after=()) if x.id == c.id else x
              for x in s.chunks]
    problems = _rejected(_replace(s, chunks))
    assert any(f"chunk {c.id} " in p for p in problems), problems


@MUTATION_SETTINGS
@given(template_cases(), st.data())
def test_flipping_reduce_is_rejected(s, data):
    assume(s.chunks)
    i = data.draw(st.integers(0, s.num_chunks - 1))
    c = s.chunks[i]
    chunks = list(s.chunks)
    chunks[i] = dataclasses.replace(c, reduce="none" if c.reduce == "sum" else "sum")
    problems = _rejected(_replace(s, chunks))
    assert any(p.startswith(f"chunk {c.id} (") for p in problems), problems


@MUTATION_SETTINGS
@given(template_cases(), st.data())
def test_after_cycle_is_rejected(s, data):
    assume(s.num_chunks >= 2)
    a, b = data.draw(st.permutations(range(s.num_chunks)))[:2]
    chunks = list(s.chunks)
    chunks[a] = dataclasses.replace(chunks[a], after=chunks[a].after + (b,))
    chunks[b] = dataclasses.replace(chunks[b], after=chunks[b].after + (a,))
    problems = _rejected(_replace(s, chunks))
    assert any("dependency cycle" in p and f"chunk {a}" in p and f"chunk {b}" in p
               for p in problems), problems


def test_analysis_records_deliveries():
    s = reduce_scatter((4,), "bf16", 2)
    a = analyze(s)
    assert not a.problems
    (c0, c1) = s.chunks
    assert a.delivered[c0.id] == [(c0.region, 1 << c0.src)]
    assert a.completed[c0.id] == [c0.region]
