"""The race checker looks at every lane of a load, not only the first.

``stencil_rows`` (``out[r] = in[r] + in[r + 1]``) with the waits of its second load dropped:
that load's first 15 rows lie in the chunk the first load already waited for, only its last
row -- a lane far from the first -- reads the next chunk, which nothing waits for any more.
A checker that looked at one lane per load (issue 28 item 8: ``offs = offs[:1]`` in
``Checker.compute_load``) reported nothing here and only the output comparison failed, so a
stale read that happened to give the right numbers would go unreported.  This test asserts the
races themselves: which ranks, chunks and launches, at which load, and how many lanes.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from syncopate.emulate import PerRank, emulate_module, fuse_module
from syncopate.emulate import mutations as mu
from syncopate.schedule import all_gather
from syncopate_mlir.dialects.syncopate import WaitOp

from corpus import unseen as U

R, C, BM = 64, 32, 16
CX = dict(BM=BM, BLOCK=C)
SIG = {n: ("constexpr" if n in CX else {"inp_ptr": "*bf16", "out_ptr": "*bf16"}.get(n, "i32"))
       for n in U.stencil_rows.arg_names}


@pytest.fixture(scope="module")
def fused():
    return fuse_module(U.stencil_rows, signature=SIG, constexprs=CX,
                       schedule=all_gather([R, C], "bf16", 2, mode="pull", split=2),
                       operand="inp_ptr", backend="sm", comm_programs=2)


def _args(seed):
    rng = np.random.default_rng(seed)
    return dict(inp_ptr=PerRank([rng.standard_normal((R, C)).astype(np.float32)
                                 for _ in range(2)]),
                out_ptr=rng.standard_normal((R, C)).astype(np.float32), M=R, n_cols=C, stride=C)


def _line_of(text: str) -> int:
    """The source line of ``stencil_rows`` that holds ``text``."""
    lines, first = inspect.getsourcelines(U.stencil_rows.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _without_second_load_waits(module):
    """The fused module with the waits guarding ``x1`` (the second load) erased: the compute
    program's waits come in two groups of four (one per chunk), one group per load."""
    waits = [w for w in module.walk() if isinstance(w, WaitOp) and not mu._in_comm(w)]
    assert len(waits) == 8, len(waits)
    for _ in range(4):
        module = mu.drop_wait(module, 4)
    return module


def test_the_fused_stencil_is_clean(fused):
    module, local = fused
    res = emulate_module(module, local, grid=(R // BM,), args=_args(1),
                         policies=("late", "in-order"), launches=2)
    assert res.ok, res.summary()


def test_a_stale_read_by_a_lane_other_than_the_first_is_a_race(fused):
    module, local = fused
    res = emulate_module(_without_second_load_waits(module), local, grid=(R // BM,),
                         args=_args(2), policies=("late",), launches=2)
    races = res.races
    # rank 0 holds rows [0, 32): its tile 1 reads rows 17..32 in x1, and row 32 is chunk 0's,
    # which nothing waits for before that load; under "late" the comm programs deliver only
    # when every compute program is blocked, so it is read before it arrives in both launches.
    # (Tiles whose first load waited for a neighbouring chunk get both chunks delivered in
    # the same comm step under this policy: no race there.)
    assert [(r.kind, r.rank, r.chunk, r.epoch) for r in races] == [
        ("read-before-arrival", 0, 0, 1), ("read-before-arrival", 0, 0, 2)], res.summary()
    assert len({r.loc for r in races}) == 1 and f":{_line_of('x1 = tl.load')}:" in races[0].loc
    for r in races:
        # the stale lanes: the load's last row (row 32 of A: elements 1024..1055), all 32 of
        # them, and none of the 15 rows before it
        assert f"loads {C} element(s) of A not yet arrived" in r.detail, r
        assert f"first: element {32 * C}," in r.detail, r
    # the wrong numbers follow from it (the row before row 32 of out: elements 992..1023)
    assert len(res.mismatches) == 2


# ------------------------------------------------------- the checker's rules, unit by unit

class _Program:
    """What the checker reads of a program: its name, rank, launch and per-chunk counts."""

    def __init__(self, rank=0, epoch=1):
        self.rank, self.epoch, self.name = rank, epoch, f"rank {rank} compute program 0"
        self.stored: dict = {}
        self.signalled: dict = {}


def _tracked(sched, tensor, rank):
    from syncopate.emulate.memory import Buffer, etype_named
    shape = sched.tensors[tensor].shape
    b = Buffer("x_ptr", rank, etype_named("fp32"), np.zeros(int(np.prod(shape)), np.float32),
               shape=tuple(shape))
    b.track(tensor)
    return b


def test_a_padding_allowance_covers_the_rows_past_the_count_and_no_more():
    """A chunk with a run-time extent (docs/moe.md): a producer may signal its rows past the
    count unstored, exactly those; one counted element short is an early signal."""
    from syncopate.emulate.checker import Checker
    from syncopate.schedule import reduce_scatter
    sched = reduce_scatter([64, 32], "fp32", 2, split=2)
    c = next(c for c in sched.chunks if c.src == 0)
    rows, row = c.hi[0] - c.lo[0], c.volume // (c.hi[0] - c.lo[0])
    valid_hi = c.lo[0] + rows // 2  # half of the chunk's rows are counted
    counted = (valid_hi - c.lo[0]) * row
    for stored, early in ((counted, False), (counted - 1, True)):
        checker = Checker(sched, 2, {})
        pc = _Program()
        pc.stored[c.id] = stored
        checker.produced_signal(pc, c.id, c.volume, c.volume, 32, None, "<loc>",
                                valid_hi=valid_hi)
        assert [r.kind for r in checker.races] == (["early-signal"] if early else []), \
            (stored, checker.races)


def test_a_write_before_a_peer_finished_reading_names_the_chunk_it_hits():
    """Host staging (no chunk of its own) overwrites an element a peer reads remotely and has
    not finished reading for the previous launch: the race names the chunk that element
    belongs to."""
    from syncopate.emulate.checker import Checker
    from syncopate.schedule import all_gather
    sched = all_gather([64, 32], "fp32", 2, split=2, mode="pull")
    c = next(c for c in sched.chunks if c.src == 0)
    buf = _tracked(sched, "A", 0)
    readers = {(0, "A"): np.ones(buf.data.size, bool)}
    checker = Checker(sched, 2, readers)
    first = c.lo[0] * 32  # the chunk's first element; nobody read launch 1's data yet
    checker.write("rank 0 host (staging)", 0, buf, np.array([first]), 2, "<host staging>")
    (race,) = checker.races
    assert (race.kind, race.chunk, race.epoch) == ("write-after-read", c.id, 2), race


def test_a_produced_flag_reaching_its_target_over_unstored_elements_is_an_early_signal():
    """Each program's own count can be right while the chunk is not: when PRODUCED reaches
    ``epoch * volume`` every element of the chunk's region must hold this launch's data."""
    from syncopate.emulate.checker import Checker
    from syncopate.schedule import reduce_scatter
    sched = reduce_scatter([64, 32], "fp32", 2, split=2)
    c = next(c for c in sched.chunks if c.src == 0)
    half = c.volume // 2
    region = np.arange(int(np.prod(sched.tensors[c.tensor].shape))).reshape(
        sched.tensors[c.tensor].shape)[tuple(slice(a, b) for a, b in zip(c.lo, c.hi))].ravel()
    for stored_elements, early in ((c.volume, False), (c.volume - 1, True)):
        checker = Checker(sched, 2, {})
        buf = _tracked(sched, c.tensor, 0)
        buf.epoch_of[region[:stored_elements]] = 1
        pc = _Program()
        pc.stored[c.id] = half  # this program stored its half and signals it: its count is fine
        checker.produced_signal(pc, c.id, half, c.volume, 32, buf, "<loc>")  # the last half
        got = [(r.kind, "reached its target" in r.detail) for r in checker.races]
        assert got == ([("early-signal", True)] if early else []), (stored_elements, got)


def test_a_skipped_read_counts_as_read_by_the_peer_only():
    """Rows past a run-time count that a transfer leaves unread (emulate/extents.py) are done
    with for the launch -- for a peer's read; a rank's own transfer is no remote read."""
    from syncopate.emulate.checker import Checker
    from syncopate.schedule import all_gather
    sched = all_gather([64, 32], "fp32", 2, split=2, mode="pull")
    offs = np.arange(32, 64)
    for reader in (0, 1):
        for owner in (0, 1):
            buf = _tracked(sched, "A", owner)
            Checker(sched, 2, {}).skipped_read(reader, buf, offs, 1)
            want = 1 if reader != owner else 0
            assert (buf.remote_read[offs] == want).all(), (reader, owner)
            assert (buf.remote_read[:32] == 0).all()


def test_a_transfer_reading_a_later_launchs_data_is_a_write_after_read():
    """The source was overwritten for launch 2 before launch 1's transfer read it."""
    from syncopate.emulate.checker import Checker
    from syncopate.schedule import all_gather
    sched = all_gather([64, 32], "fp32", 2, split=2, mode="pull")
    c = next(c for c in sched.chunks if c.src == 0)
    buf = _tracked(sched, "A", 0)
    offs = np.arange(c.lo[0] * 32, c.hi[0] * 32)
    for held, kind in ((1, None), (2, "write-after-read"), (0, "read-before-arrival")):
        checker = Checker(sched, 2, {})
        buf.epoch_of[offs] = held
        checker.transfer_read("rank 1 comm program 0", 1, buf, offs, 1, c.id, "<loc>")
        assert [r.kind for r in checker.races] == ([kind] if kind else []), (held, checker.races)


def test_a_store_into_a_delivered_tensor_is_recorded_as_a_write():
    """A (mutated or refused) kernel storing into the tensor the schedule delivers: the
    checker records the write (its launch's data now) and counts nothing as produced."""
    from syncopate.emulate.checker import Checker
    from syncopate.schedule import all_gather
    sched = all_gather([64, 32], "fp32", 2, split=2, mode="pull")
    buf = _tracked(sched, "A", 1)
    pc = _Program(rank=1)
    Checker(sched, 2, {}).compute_store(pc, buf, np.arange(8), "<loc>")
    assert (buf.epoch_of[:8] == 1).all() and (buf.epoch_of[8:] == 0).all()
    assert pc.stored == {}
