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
