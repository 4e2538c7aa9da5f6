"""The launch-time check that no element of a produced tensor is stored twice or never
(``syncopate.tiling.check_stores``), on the slices ``check-accesses`` records for real kernels
at real shapes: the project's grouped-swizzle GEMM and persistent TMA GEMM at 8192 x 8192 with
128 x 256 tiles, a 2-D grid, a persistent GEMM launched with more or fewer programs than its
stride, and the overlapping tilings of ``tests/corpus/unseen3.py`` -- each clean at the
launches where every element is stored once and refused at the others.  The launch-time check
that a tile remap renumbers the launch's tiles (``check_remaps``) on the same GEMMs.  Then
every arithmetic step of a slice against the kernel's integer semantics (C division, unsigned
views, wrap-around).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from syncopate import tiling
from syncopate.compiler import fuse_request
from syncopate.emulate import kernel_ttir
from syncopate.errors import LaunchError
from syncopate.kernels import compile_args, compile_attrs, kernel_fn
from syncopate.schedule import all_gather, reduce_scatter
from syncopate.tiling import Op, RemapSlice, Step, StoreSlice, check_remaps, check_stores
from syncopate_mlir.dialects.syncopate import state_of
from syncopate_mlir.pipeline import run_pipeline_until

from corpus import unseen as U1
from corpus import unseen3 as U3

TWICE = "is stored twice in one launch"


def _stores(fn, signature, constexprs, shape, operand="c_ptr", attrs=None, dtype="bf16"):
    """The store slices check-accesses records for ``fn`` fused with a reduce-scatter of
    ``operand``'s tensor of ``shape``."""
    sched = reduce_scatter(list(shape), dtype, 2)
    request = fuse_request(fn, signature=signature, constexprs=constexprs, schedule=sched,
                           operand=operand, backend="sm", comm_programs=None, keep_ir=False)
    module, _ = run_pipeline_until(kernel_ttir(fn, signature, constexprs, attrs), request,
                                   "check-accesses")
    stores = state_of(module).stores
    assert stores, state_of(module).remarks
    return stores


def _gemm(kind: str, **cx):
    sig, constexprs = compile_args(kind, "bf16")
    constexprs.update(BLOCK_M=128, BLOCK_N=256, **cx)
    return _stores(kernel_fn(kind), sig, constexprs, (8192, 8192), attrs=compile_attrs(kind))


GEMM_ARGS = dict(M=8192, N=8192, K=4096, stride_am=4096, stride_bk=8192, stride_cm=8192)


def test_grouped_swizzle_gemm_stores_each_element_once():
    """Triton-tutorial grouping (``GROUP_M`` tile rows per group, column-major inside): a
    bijection onto the 64 x 32 tiles; programs past the last tile store past the tensor."""
    stores = _gemm("ptr", GROUP_M=8)
    check_stores(stores, (64 * 32,), GEMM_ARGS)
    check_stores(stores, (64 * 32 + 100,), GEMM_ARGS)


def test_persistent_gemm_stores_each_element_once_unless_the_grid_exceeds_its_stride():
    """132 programs walk the 2048 tiles with a stride of NUM_SMS = 132 (TMA descriptor stores,
    both epilogue halves); launched on 264 programs, programs p and p + 132 walk the same
    tiles (tile 136: program 4's second, program 136's first)."""
    stores = _gemm("tma", NUM_SMS=132, GROUP_M=8, EPILOGUE_SUBTILE=True)
    assert len(stores) == 2
    check_stores(stores, (132,), GEMM_ARGS)
    with pytest.raises(LaunchError, match=TWICE + r" of grid \(264, 1, 1\): by the store at "
                                          r".*gemm\.py:\d+:\d+ in program \(4, 0, 0\), "
                                          r"iteration \(1,\) of its loops, and by the store at "
                                          r".* in program \(136, 0, 0\), iteration \(0,\)"):
        check_stores(stores, (264,), GEMM_ARGS)


def test_2d_grid_stores_each_element_once():
    sig = dict(x_ptr="*bf16", y_ptr="*bf16", c_ptr="*bf16", M="i32", N="i32", K="i32",
               stride_xk="i32", stride_xm="i32", stride_yk="i32", stride_yn="i32",
               stride_cm="i32", stride_cn="i32")
    stores = _stores(U1.xt_gemm_2d, sig, dict(BM=128, BN=256, BK=64), (8192, 8192))
    check_stores(stores, (64, 32), dict(M=8192, N=8192, K=4096))
    check_stores(stores, (70, 40, 1), dict(M=8192, N=8192, K=4096))


_ROWS = dict(x_ptr="*fp32", y_ptr="*fp32", M="i32", n_cols="i32", stride="i32")


@pytest.mark.parametrize("fn,cx,shape,grid,args,twice", [
    # a column loop stepping by half its tile: one iteration (a row of 8) stores once
    (U3.overlap_step, dict(BM=1, BLOCK=16), (64, 8), (64,), dict(n_cols=8), False),
    (U3.overlap_step, dict(BM=1, BLOCK=16), (64, 4096), (64,), dict(n_cols=4096), True),
    # the second store overlaps the next iteration's first: one iteration does not
    (U3.shifted_pair, dict(BM=1, BLOCK=16), (64, 16), (64,), dict(n_cols=16), False),
    (U3.shifted_pair, dict(BM=1, BLOCK=16), (64, 4096), (64,), dict(n_cols=4096), True),
    # neighbouring programs share rows: one program does not
    (U3.grid_overlap, dict(BM=4, BLOCK=64), (4, 64), (1,), dict(M=4, n_cols=64), False),
    (U3.grid_overlap, dict(BM=4, BLOCK=64), (64, 64), (32,), dict(M=64, n_cols=64), True),
    # a persistent loop over half-overlapping tiles: one tile (M = 2) does not
    (U3.persistent_overlap, dict(BM=4, BLOCK=64), (2, 64), (4,), dict(M=2, n_cols=64), False),
    (U3.persistent_overlap, dict(BM=4, BLOCK=64), (64, 64), (4,), dict(M=64, n_cols=64), True),
])
def test_overlapping_tilings_are_refused_only_where_they_overlap(fn, cx, shape, grid, args,
                                                                  twice):
    stores = _stores(fn, _ROWS, cx, shape, operand="y_ptr", dtype="fp32")
    args = dict(dict(M=shape[0], stride=shape[1]), **args)
    if not twice:
        check_stores(stores, grid, args)
        return
    with pytest.raises(LaunchError, match=TWICE + r".*the store at .*unseen3\.py:\d+"):
        check_stores(stores, grid, args)


def test_a_launch_that_never_stores_an_element_is_refused():
    """Every store of the persistent TMA GEMM's C has a slice, so a launch must store every
    element: on 100 programs (a stride of NUM_SMS = 132) the tiles 100..131 of every round are
    never stored, their chunks never leave, and the fused kernel waited for them forever (a
    deadlock in the emulator: tests/test_probe_unseen4.py's persistent_fixed_sms). A tensor
    with a store that has no slice is not held to it (its other stores cannot say what it
    stores)."""
    stores = _gemm("tma", NUM_SMS=132, GROUP_M=8, EPILOGUE_SUBTILE=True)
    assert all(s.whole for s in stores)
    with pytest.raises(LaunchError, match=r"element \(0, 3328\) of tensor 'C', which the kernel "
                                          r"produces for the schedule, is never stored in a "
                                          r"launch of grid \(100, 1, 1\) \(by the stores at "
                                          r".*gemm\.py:\d+:\d+, .*gemm\.py:\d+:\d+\)"):
        check_stores(stores, (100,), GEMM_ARGS)
    check_stores([replace(s, whole=False) for s in stores], (100,), GEMM_ARGS)


def _remaps(kind: str, **cx):
    """The remap checks tile-remap records for the project's GEMM ``kind`` fused with an
    all-gather of A (8192 x 4096, 2 ranks) along M."""
    sig, constexprs = compile_args(kind, "bf16")
    constexprs.update(BLOCK_M=128, BLOCK_N=256, **cx)
    request = fuse_request(kernel_fn(kind), signature=sig, constexprs=constexprs,
                           schedule=all_gather([8192, 4096], "bf16", 2, split=2),
                           operand="a_ptr", backend="sm", comm_programs=None, keep_ir=False)
    module, _ = run_pipeline_until(kernel_ttir(kernel_fn(kind), sig, constexprs,
                                               compile_attrs(kind)), request, "tile-remap")
    checks = state_of(module).remap_checks
    assert len(checks) == 1 and state_of(module).remap, state_of(module).remarks
    return checks


NOT_A_GRID = "the launch's tiles do not form a grid along the coordinate"


def test_remap_of_the_project_gemms_renumbers_their_launches_tiles():
    """The grouped-swizzle GEMM and the persistent TMA GEMM compute every (pid_m, pid_n) tile
    once on their own grids (the grouped one on more programs than tiles too: the extra ones
    work past the tensor), so the remap is a renumbering; fewer programs leave some row tiles
    of a column out, and the remap would move the launch onto them."""
    grouped = _remaps("ptr", GROUP_M=8)
    check_remaps(grouped, (64 * 32,), GEMM_ARGS)
    check_remaps(grouped, (64 * 32 + 100,), GEMM_ARGS)
    with pytest.raises(LaunchError, match=NOT_A_GRID):
        check_remaps(grouped, (64 * 32 - 8,), GEMM_ARGS)
    persistent = _remaps("tma", NUM_SMS=132, GROUP_M=8, EPILOGUE_SUBTILE=True)
    check_remaps(persistent, (132,), GEMM_ARGS)
    with pytest.raises(LaunchError, match=r"on rank 1, program \(\d+, 0, 0\), iteration "
                                          r"\(\d+,\) of its tile loops has coordinate \d+ .*"
                                          + NOT_A_GRID):
        check_remaps(persistent, (100,), GEMM_ARGS)


def test_remap_check_counts_each_tile_as_often_as_the_launch():
    """A coordinate ``x = pid // 2`` with one other coordinate ``r = pid % 2``, tiles 0..3 and
    a rank-1 table swapping 0 <-> 1: the launch must compute (1, r) as often as (0, r)."""
    steps = (Step(Op.PID), Step(Op.CONST, value=2), Step(Op.DIVS, (0, 1)),
             Step(Op.REMS, (0, 1)))
    check = RemapSlice("A", 0, "k.py:3", 4, (0, 1, 2, 3, 1, 0, 2, 3), steps, 2, (3,))
    check_remaps([check], (8,), {})      # every (x, r) once
    check_remaps([check], (4,), {})      # x in {0, 1}, each with r in {0, 1}
    with pytest.raises(LaunchError, match=r"on rank 1, program \(1, 0, 0\) has coordinate 0 "
                                          r"and would run as coordinate 1, a tile this launch of "
                                          r"grid \(3, 1, 1\) computes 0 time\(s\) with that "
                                          r"program's other coordinates, the remapped launch 1"):
        check_remaps([check], (3,), {})  # (0, 0), (0, 1), (1, 0): no (1, 1) for (0, 1)


def test_a_repeated_launch_is_not_evaluated_again():
    """The check runs once per (stores, grid, arguments the slices read)."""
    stores = _gemm("ptr", GROUP_M=8)
    check_stores(stores, (2048,), GEMM_ARGS)
    before = tiling._overlap.cache_info()
    check_stores(stores, (2048,), dict(GEMM_ARGS, stride_am=1))  # an argument no slice reads
    after = tiling._overlap.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


# ------------------------------------------------------------------ the steps' arithmetic

#: op -> (its value: a predicate, ...), operands, operand bits, result bits, expected value
ARITH = {
    Op.ADD: (0, (5, 3), 32, 32, 8),
    Op.SUB: (0, (5, 7), 32, 32, -2),
    Op.MUL: (0, (65536, 65537), 32, 32, 65536),          # wraps at 32 bits
    Op.DIVS: (0, (-7, 2), 32, 32, -3),                   # toward zero
    Op.DIVU: (0, (-1, 2), 32, 32, 2 ** 31 - 1),          # -1 read as 2**32 - 1
    Op.REMS: (0, (-7, 2), 32, 32, -1),                   # the dividend's sign
    Op.REMU: (0, (-1, 10), 32, 32, 5),
    Op.CEILDIVS: (0, (-7, 2), 32, 32, -3),
    Op.CEILDIVU: (0, (7, 2), 32, 32, 4),
    Op.FLOORDIVS: (0, (-7, 2), 32, 32, -4),
    Op.MINS: (0, (-1, 3), 32, 32, -1),
    Op.MAXS: (0, (-1, 3), 32, 32, 3),
    Op.MINU: (0, (-1, 3), 32, 32, 3),
    Op.MAXU: (0, (-1, 3), 32, 32, -1),
    Op.AND: (0, (6, 3), 32, 32, 2),
    Op.OR: (0, (6, 3), 32, 32, 7),
    Op.XOR: (0, (6, 3), 32, 32, 5),
    Op.SHL: (0, (1, 31), 32, 32, -2 ** 31),
    Op.SHRS: (0, (-8, 1), 32, 32, -4),
    Op.SHRU: (0, (-8, 1), 32, 32, 2 ** 31 - 4),
    Op.EXTS: (0, (-1,), 32, 64, -1),
    Op.EXTU: (0, (-1,), 32, 64, 2 ** 32 - 1),
    Op.TRUNC: (0, (2 ** 32 + 5,), 64, 32, 5),
    Op.CMP: (6, (-1, 3), 32, 1, 0),                      # ult: -1 is the larger
    Op.SELECT: (0, (0, 4, 9), 32, 32, 9),
}
#: the structural steps, which the kernels above run
STRUCTURAL = {Op.CONST, Op.ARG, Op.PID, Op.NPROGS, Op.FOR, Op.WHERE}


def test_every_step_is_tested():
    assert set(ARITH) | STRUCTURAL == set(Op)


@pytest.mark.parametrize("op", list(ARITH))
def test_step_computes_what_the_kernel_computes(op):
    """A store at ``op(operands) + 2**33`` overlaps a store at ``expected + 2**33`` (and only
    that one of the two neighbours)."""
    value, operands, bits, out, expected = ARITH[op]
    steps = [Step(Op.CONST, value=v, bits=bits) for v in operands]
    steps += [Step(op, tuple(range(len(operands))), value=value, bits=out),
              Step(Op.CONST, value=2 ** 33), Step(Op.ADD, (len(operands), len(operands) + 1))]
    start = len(steps) - 1

    def at(x):
        return StoreSlice("T", f"k.py:{x}", (2 ** 35,), (Step(Op.CONST, value=x + 2 ** 33),),
                          (0,), (1,))
    computed = StoreSlice("T", "k.py:1", (2 ** 35,), tuple(steps), (start,), (1,))
    with pytest.raises(LaunchError, match=rf"element \({expected + 2 ** 33},\)"):
        check_stores((computed, at(expected)), (1,), {})
    check_stores((computed, at(expected + 1)), (1,), {})
