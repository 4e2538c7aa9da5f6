"""The Ulysses plan (``ulysses_all_to_all``): Q/K/V sequence-sharded -> head-sharded, O back.

Why these checks: the fused Ulysses attention relies on three properties of the plan beyond
"it verifies": every chunk carries exactly one head (so a tile waits only for its own head),
the inputs of a KV head (and its query heads) arrive before the next one's (so the first heads'
tiles start early), and no output chunk comes before an input chunk in step order (a comm
program blocked on an output chunk must not hold back the inputs its peers' tiles wait for).
"""

from __future__ import annotations

import pytest

from syncopate import chunk_table
from syncopate.schedule.copy_view import copy_view
from syncopate.errors import ScheduleError
from syncopate.schedule import (PLANS, Placement, Region, TensorSpec, dumps, loads,
                                ulysses_all_to_all, verify)

CASES = [  # (B, Hq, Hkv, S, D, W)
    (1, 4, 2, 16, 64, 2),
    (2, 8, 4, 32, 64, 4),
    (2, 8, 8, 32, 64, 4),
    (1, 16, 8, 64, 128, 8),
    (1, 2, 1, 8, 64, 1),
]


@pytest.mark.parametrize("mode", ["pull", "push"])
@pytest.mark.parametrize("case", CASES)
def test_plan_verifies_and_delivers_head_blocks(case, mode):
    B, Hq, Hkv, S, D, W = case
    s = ulysses_all_to_all(B, Hq, Hkv, S, D, "bf16", W, mode=mode)
    verify(s)
    assert PLANS["ulysses_all_to_all"] is ulysses_all_to_all
    assert [c.id for c in s.chunks] == list(range(s.num_chunks))
    heads = {"Q": Hq, "K": Hkv, "V": Hkv, "O": Hq}
    for t, spec in s.tensors.items():
        assert spec.view == "rank" and spec.produced == (t == "O")
        assert spec.shape == (B, heads[t], S, D)
        hb, sb = heads[t] // W, S // W
        for r in range(W):
            (fin,) = spec.final_of(r)
            (ini,) = spec.initial_of(r)
            head_part = Region((0, r * hb, 0, 0), (B, hb, S, D))
            seq_part = Region((0, 0, r * sb, 0), (B, heads[t], sb, D))
            assert (ini.region, fin.region) == ((head_part, seq_part) if t == "O"
                                                 else (seq_part, head_part))
        # the part a kernel addresses: head block r, at offset r * (heads / W) along dim 1
        assert s.rank_part(t) == ((B, hb, S, D), (0, hb if W > 1 else 0, 0, 0))
    # one chunk per head and (source, destination) pair
    assert s.num_chunks == (W - 1) * (2 * Hq + 2 * Hkv)
    for c in s.chunks:
        assert c.mode == mode and c.reduce == "none"
        assert c.region.sizes[1] == 1, "one head per chunk"
        # a 2-d box of the [B, H * S * D] view the sm comm programs copy
        assert copy_view(s.tensors[c.tensor].shape, [(c.lo, c.hi)]).cut == 1
        assert c.region.sizes[0] == B and c.region.sizes[3] == D
        assert c.region.sizes[2] == S // W, "one source's sequence block"
        head_owner = c.region.offsets[1] // (heads[c.tensor] // W)
        seq_owner = c.region.offsets[2] // (S // W)
        if c.tensor == "O":
            assert (c.src, c.dst) == (head_owner, seq_owner)
        else:
            assert (c.src, c.dst) == (seq_owner, head_owner)
    last_in = max((c.step for c in s.chunks if c.tensor != "O"), default=-1)
    assert all(c.step > last_in for c in s.chunks if c.tensor == "O")


def test_head_groups_arrive_in_order():
    """On every rank the chunks of local KV head j (and its query heads) all come before any
    chunk of KV head j + 1: the tiles of the first heads can start while the rest travels."""
    W, Hq, Hkv = 4, 16, 8
    s = ulysses_all_to_all(1, Hq, Hkv, 32, 64, "bf16", W)
    for r in range(W):
        groups = []
        for c in sorted((c for c in s.chunks if c.dst == r and c.tensor != "O"),
                        key=lambda c: (c.step, c.id)):
            per = Hq // Hkv if c.tensor == "Q" else 1
            groups.append(c.region.offsets[1] // per - r * (Hkv // W))
        assert groups == sorted(groups)
        assert set(groups) == set(range(Hkv // W))


def test_json_round_trip_keeps_roles_and_views():
    s = ulysses_all_to_all(2, 8, 4, 32, 64, "bf16", 4)
    text = dumps(s)
    assert '"produced": true' in text and '"view": "rank"' in text
    assert loads(text) == s


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_chunk_table_builds(mode):
    s = ulysses_all_to_all(2, 8, 4, 32, 64, "bf16", 4, mode=mode)
    words = chunk_table.build(s, "sm", writers=2)
    chunk_table.validate(words, s, "sm", writers=2)


@pytest.mark.parametrize("kw, match", [
    (dict(kv_heads=3), "must be a multiple of kv_heads"),
    (dict(kv_heads=2, world_size=4), r"kv_heads \(2\) must be divisible by world_size \(4\)"),
    (dict(seq=30), r"seq \(30\) must be divisible by world_size"),
    (dict(mode="send"), "mode must be 'push' or 'pull'"),
    (dict(batch=0), "batch must be a positive integer"),
])
def test_plan_argument_errors(kw, match):
    args = dict(batch=1, q_heads=8, kv_heads=4, seq=32, head_dim=64, dtype="bf16",
                world_size=4)
    args.update(kw)
    with pytest.raises(ScheduleError, match=match):
        ulysses_all_to_all(**args)


def test_rank_part_refuses_parts_the_kernel_cannot_offset():
    full = Region.full((8, 4))
    two = TensorSpec("A", (8, 4), "bf16", [Placement(0, full)],
                     [Placement(0, Region((0, 0), (4, 4))), Placement(0, Region((4, 0), (4, 4))),
                      Placement(1, full)], view="rank")
    with pytest.raises(ScheduleError, match="rank 0 has 2 final placement"):
        two.rank_part(2, produced=False)
    ragged = TensorSpec("A", (8, 4), "bf16", [Placement(0, full)],
                        [Placement(0, Region((0, 0), (5, 4))),
                         Placement(1, Region((5, 0), (3, 4)))], view="rank")
    with pytest.raises(ScheduleError, match="not equal boxes"):
        ragged.rank_part(2, produced=False)
    with pytest.raises(ScheduleError, match="view must be one of"):
        TensorSpec("A", (8, 4), "bf16", view="local")
