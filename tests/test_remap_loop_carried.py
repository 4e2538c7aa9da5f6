"""Which tile coordinates tile-remap may rewrite (docs/soundness.md), on kernels whose
coordinate passes through a loop or a branch.

Three kernels walk row tiles with a counter ``t`` that a loop advances:

* ``loaded_step_rows`` -- the accesses sit in the loop and ``t`` advances by a *loaded* step:
  ``t`` is not a pure function of program ids and tile loops, so it is never remapped
  (``passes/purity.py`` follows what the loop yields, not only where it starts);
* ``loaded_offset_rows`` -- the loop only adds loaded steps to ``t``; the access after it uses
  the loop's result.  Remapping that result (issue 28 item 8: purity ignoring what a loop
  yields) made rank 1 compute other tiles than the unfused kernel: a silent miscompile;
* ``arg_step_rows`` -- the same walk with a *pure* step (a kernel argument).  Remapping the
  carried ``t`` replaced its use in the loop's own advance, so the next iteration started from
  ``table[t] + step`` and left the grid: rank 1's rows were never written.  Such a coordinate
  is refused (the lit test: lit_tests/tile-remap-loop-carried.mlir).

``branch_rows`` computes its coordinate in an ``scf.if`` on a kernel argument: a pure function
of the program id, so it *is* remapped (purity follows both branches' yields);
``loaded_branch_rows`` branches on a loaded value instead, and is not.  Two more rules of
docs/soundness.md: ``second_counter_rows`` stores through a tile counter of its own and
``last_tile_rows`` through the program id its tile loop starts from (rule 3; the latter was
remapped, and rank 1's rows came out wrong, until the tile loop's induction variable was taken
to follow its bounds),
``tile_loop_sums``' coordinate counts the iterations of a loop that sums floats (rule 4).

Each is compiled for sm_90 on this CPU and emulated for 2 ranks over 2 launches.
"""

from __future__ import annotations

import numpy as np
import pytest
import triton
import triton.language as tl

import syncopate
from syncopate.emulate import PerRank, emulate
from syncopate.schedule import all_gather


@triton.jit
def loaded_step_rows(inp_ptr, out_ptr, step_ptr, M, n_cols, stride, BM: tl.constexpr,
                     BLOCK: tl.constexpr, ITERS: tl.constexpr):
    t = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for i in range(ITERS):
        rows = t * BM + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m)
        tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x, mask=m)
        t += tl.load(step_ptr + i)


@triton.jit
def loaded_offset_rows(inp_ptr, out_ptr, step_ptr, M, n_cols, stride, BM: tl.constexpr,
                       BLOCK: tl.constexpr, ITERS: tl.constexpr):
    t = tl.program_id(0)
    for i in range(ITERS):
        t += tl.load(step_ptr + i)
    cols = tl.arange(0, BLOCK)
    rows = t * BM + tl.arange(0, BM)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m)
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x, mask=m)


@triton.jit
def arg_step_rows(inp_ptr, out_ptr, step, M, n_cols, stride, BM: tl.constexpr,
                  BLOCK: tl.constexpr, ITERS: tl.constexpr):
    t = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for i in range(ITERS):
        rows = t * BM + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m)
        tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x, mask=m)
        t += step


@triton.jit
def branch_rows(inp_ptr, out_ptr, step, M, n_cols, stride, BM: tl.constexpr,
                BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    if step > 0:
        t = pid
    else:
        t = (pid * 2) // 2  # computed in the branch: an scf.if yields it (no select)
    cols = tl.arange(0, BLOCK)
    rows = t * BM + tl.arange(0, BM)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m)
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x, mask=m)


@triton.jit
def loaded_branch_rows(inp_ptr, out_ptr, step_ptr, M, n_cols, stride, BM: tl.constexpr,
                       BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    if tl.load(step_ptr) > 0:  # a loaded condition: the branch's result is not pure
        t = pid
    else:
        t = (pid * 2) // 2
    cols = tl.arange(0, BLOCK)
    rows = t * BM + tl.arange(0, BM)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m)
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x, mask=m)


@triton.jit
def second_counter_rows(inp_ptr, out_ptr, step, M, n_cols, stride, BM: tl.constexpr,
                        BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    t2 = pid
    cols = tl.arange(0, BLOCK)
    for tile in range(pid, ITERS * step, step):
        rows = tile * BM + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m)
        rows2 = t2 * BM + tl.arange(0, BM)
        tl.store(out_ptr + rows2[:, None] * stride + cols[None, :], x, mask=m)
        t2 += step


@triton.jit
def tile_loop_sums(inp_ptr, out_ptr, step, M, n_cols, stride, BM: tl.constexpr,
                   BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for t in range(0, ITERS):
        rows = t * BM + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + pid * stride + cols, acc.to(tl.bfloat16), mask=cols < n_cols)


@triton.jit
def last_tile_rows(inp_ptr, out_ptr, step, M, n_cols, stride, BM: tl.constexpr,
                   BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for tile in range(pid, ITERS * step, step):
        rows = tile * BM + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m)
        rows2 = pid * BM + tl.arange(0, BM)
        tl.store(out_ptr + rows2[:, None] * stride + cols[None, :], x, mask=m)


R, C, BM = 64, 32, 16
CX = dict(BM=BM, BLOCK=C, ITERS=2)
#: constexprs per kernel where they differ (tile_loop_sums' loop visits all 4 row tiles)
CX_OF = {"tile_loop_sums": dict(BM=BM, BLOCK=C, ITERS=R // BM)}
TYPES = {"inp_ptr": "*bf16", "out_ptr": "*bf16", "step_ptr": "*i32"}

# kernel, its step argument, the grid: every case visits rows the remap would move on rank 1
# (its table runs tiles 2, 3 -- its own rows -- before 0, 1)
CASES = {
    # two programs, each two tiles apart: tiles {0, 2} and {1, 3}
    "loaded_step_rows": (loaded_step_rows, {"step_ptr": np.array([2, 2], np.int32)}, (2,)),
    "arg_step_rows": (arg_step_rows, {"step": 2}, (2,)),
    # four programs moved on by 1 + 1 tiles: tiles 2, 3 (4 and 5 are masked off)
    "loaded_offset_rows": (loaded_offset_rows, {"step_ptr": np.array([1, 1], np.int32)}, (4,)),
    # one tile per program, the branch taken chosen by a loaded value
    "loaded_branch_rows": (loaded_branch_rows, {"step_ptr": np.array([1], np.int32)}, (4,)),
    # loads follow the tile loop, stores a counter of their own: tiles {0, 2} and {1, 3}
    "second_counter_rows": (second_counter_rows, {"step": 2}, (2,)),
    # loads follow the tile loop (from pid), the store the program id: the last tile wins
    "last_tile_rows": (last_tile_rows, {"step": 2}, (2,)),
    # one program sums the column tiles of every row tile, in the loop's order
    "tile_loop_sums": (tile_loop_sums, {"step": 1}, (1,)),
}
#: remapped: one tile per program, either branch
REMAPPED = {"branch_rows": (branch_rows, {"step": 0}, (4,))}
WHY = {
    "loaded_step_rows": "depends on a loop-carried value that is not pure",
    "loaded_offset_rows": "depends on a loop result that is not pure",
    "arg_step_rows": "carries from one iteration to the next",
    "loaded_branch_rows": "depends on a branch whose condition or results are not pure",
    "second_counter_rows": "computes its tile from the program id without the remapped "
                           "coordinate (a second tile counter?)",
    "last_tile_rows": "computes its tile from the program id without the remapped "
                      "coordinate (a second tile counter?)",
    "tile_loop_sums": "counts the iterations of a loop that accumulates floating-point values",
}


def _sig(fn):
    return {n: ("constexpr" if n in CX else TYPES.get(n, "i32")) for n in fn.arg_names}


def _schedule():
    return all_gather([R, C], "bf16", 2, split=2)


@pytest.mark.parametrize("name", sorted(CASES))
def test_coordinate_is_not_remapped(name):
    fn, _, _ = CASES[name]
    ir = _compile(fn).ir_after["tile-remap"]
    assert "= syncopate.remap " not in ir
    assert "A dim 0 not remapped: " in ir and WHY[name] in ir, \
        ir[ir.find("remarks"):][:400]


def _compile(fn):
    return syncopate.compile(fn, signature=_sig(fn), constexprs=CX_OF.get(fn.__name__, CX),
                             schedule=_schedule(), operand="inp_ptr", backend="sm",
                             comm_programs=2)


def test_coordinate_yielded_by_a_branch_is_remapped():
    ir = _compile(branch_rows).ir_after["tile-remap"]
    assert "scf.if" in ir and "= syncopate.remap " in ir, ir[ir.find("remarks"):][:400]


@pytest.mark.parametrize("name", sorted(CASES) + sorted(REMAPPED))
def test_coordinate_emulates_like_the_unfused_kernel(name):
    fn, step, grid = {**CASES, **REMAPPED}[name]
    rng = np.random.default_rng(11)
    args = dict(inp_ptr=PerRank([rng.standard_normal((R, C)).astype(np.float32)
                                 for _ in range(2)]),
                out_ptr=rng.standard_normal((R, C)).astype(np.float32), M=R, n_cols=C,
                stride=C, **step)
    res = emulate(fn, signature=_sig(fn), constexprs=CX_OF.get(fn.__name__, CX),
                  schedule=_schedule(), operand="inp_ptr", grid=grid, args=args, backend="sm",
                  comm_programs=2, policies=("in-order", "late", "behind:1"), launches=2,
                  check=False)
    assert res.ok, res.summary()
