"""Issue 28's probe, fourth round: the kernels of ``tests/corpus/unseen4.py``, each fused with
the schedules that could move one of its tensors, emulated for 2 and 3 ranks over 2 launches
under several interleavings, and compared with the unfused kernel (``tests/probe_helpers.py``,
one schedule per case and binding, the template, W, mode and backend rotating).

:data:`EXPECT` says what each kernel and binding must give: emulated clean, or refused with a
typed error whose message matches (a CompileError names the kernel's line, ``unseen4.py:N``).
A case the compiler accepts but that races, mismatches, deadlocks or raises a raw Python
exception is a finding.  The findings of this round get a test over every schedule that could
move the tensor: tile enumerations that are not grids (:data:`NON_GRIDS`: the remap made the
kernel compute other tiles; now refused at launch, or not remapped), launches that never store
some elements of a produced tensor (:data:`NEVER_STORED`: a deadlock; now refused at launch),
and a tile coordinate computed from a comparison (the waits tested the wrong chunk).
"""

from __future__ import annotations

import inspect
import re
from typing import Callable

import numpy as np
import pytest

from syncopate.emulate import emulate
from syncopate.errors import LaunchError
from syncopate.schedule import all_gather

from corpus import unseen4 as U
from probe_helpers import (CLEAN, Bind, Case, _gemm_case, _per_rank, _rows_case, _zeros,
                           check_expectations_cover, items, probe, run, schedules, signature)

R, C = 48, 32


def _tiles(fn, cx=None, **kw):
    """A row-tile kernel: ``BM`` rows a program (8 unless ``cx`` says), ``R / BM`` programs."""
    cx = cx or dict(BM=8, BLOCK=32)
    return _rows_case(fn, cx, grid=(R // cx["BM"],), **kw)


def _both(shape, dims=(0, 1), x="x_ptr", y="y_ptr"):
    return (Bind(x, shape, dims), Bind(y, shape, dims, True))


def _bp(fn, N, BN, BM=16):
    return Case(fn, dict(BM=BM, BN=BN), dict(x_ptr="*fp32", y_ptr="*fp32"),
                lambda W: dict(x_ptr=_per_rank((R, N), 1, W), y_ptr=_zeros((R, N)), M=R, N=N,
                               stride=N),
                (R // BM,), _both((R, N)))


def _perm3d():
    B, M, N = 2, 12, 32
    return Case(U.perm3d_rows, dict(BLOCK=32), dict(x_ptr="*fp32", y_ptr="*fp32"),
                lambda W: dict(x_ptr=_per_rank((B, M, N), 1, W), y_ptr=_zeros((B, M, N)), B=B,
                               M=M, N=N, sxb=M * N, sxm=N, syb=M * N, sym=N),
                (M, B), _both((B, M, N), (0, 1, 2)))


def _perm3d_masked():
    case = _perm3d()
    return Case(U.perm3d_rows_masked, *[getattr(case, f) for f in ("cx", "types", "args",
                                                                   "grid", "binds")])


def _bhsd(cx=False):
    B, H, S, D = 2, 3, 16, 8

    def args(W):
        a = dict(x_ptr=_per_rank((B, H, S, D), 1, W), y_ptr=_zeros((B, H, S, D)), S=S, D=D,
                 sb=H * S * D, sh=S * D, ss=D)
        return a if cx else dict(a, H=H)
    return Case(U.bhsd_tiles_cx if cx else U.bhsd_tiles, dict(BS=8, BD=8, **(dict(H=H) if cx
                                                                             else {})),
                dict(x_ptr="*fp32", y_ptr="*fp32"), args, (S // 8, B * H),
                _both((B, H, S, D), (0, 1, 2)))


def _batch_axis2():
    B, M, N = 3, 16, 32
    return Case(U.batch_axis2_rows, dict(BM=8, BN=16), dict(x_ptr="*fp32", y_ptr="*fp32"),
                lambda W: dict(x_ptr=_per_rank((B, M, N), 1, W), y_ptr=_zeros((B, M, N)), M=M,
                               N=N, sxb=M * N),
                (M // 8, N // 16, B), _both((B, M, N), (0, 1, 2)))


def _desc():
    return Case(U.desc_straddle, dict(BM=16, BN=64), dict(x_ptr="*fp32", y_ptr="*fp32"),
                lambda W: dict(x_ptr=_per_rank((R, C), 1, W), y_ptr=_zeros((R, C)), M=R, N=C),
                (R // 16,), _both((R, C), (0,)))


def _gemm(fn, grid=None, binds=None, cx=None, **kw):
    return _gemm_case(fn, K=32, grid=grid, cx=cx, binds=binds or (
        Bind("a_ptr", (48, 32), (0, 1)), Bind("b_ptr", (32, 32), (0, 1)),
        Bind("c_ptr", (48, 32), (0, 1), True)), stride_am=32, stride_bk=32, stride_cm=32, **kw)


def _gather():
    def extra(W):
        return dict(idx_ptr=np.random.default_rng(5).integers(0, R, R).astype(np.int32))
    return _tiles(U.gather_beside_store, extra=extra, extra_types=dict(idx_ptr="*i32"))


def _two_params():
    def extra(W):
        return dict(y_hi_ptr=_zeros((R // 2, C)))
    return _tiles(U.two_params_one_output, extra=extra, extra_types=dict(y_hi_ptr="*fp32"),
                  binds=(Bind("x_ptr", (R, C), (0, 1)), Bind("y_ptr", (R // 2, C), (0, 1), True),
                         Bind("y_hi_ptr", (R // 2, C), (0, 1), True)), out_shape=(R // 2, C))


CASES: dict[str, Callable[[], Case]] = {
    "tril_block_gemm": lambda: _gemm_case(
        U.tril_block_gemm, M=48, N=48, K=32, grid=(6,), cx=dict(BM=16, BN=16, BK=16, T=3),
        binds=(Bind("a_ptr", (48, 32), (0,)), Bind("b_ptr", (32, 48), (1,)),
               Bind("c_ptr", (48, 48), (0, 1), True)), stride_am=32, stride_bk=48, stride_cm=48),
    "row_window": lambda: _rows_case(U.row_window, dict(BM=8, BLOCK=32), grid=(3,),
                                     extra=lambda W: dict(row0=16)),
    "persistent_fixed_sms": lambda: _rows_case(U.persistent_fixed_sms,
                                               dict(BM=8, BLOCK=32, NUM_SMS=4), grid=(2,)),
    "persistent_fixed_sms_full": lambda: _rows_case(U.persistent_fixed_sms,
                                                    dict(BM=8, BLOCK=32, NUM_SMS=4), grid=(4,)),
    "pid_in_data": lambda: _rows_case(U.pid_in_data, dict(BM=8, HALF=16), grid=(2 * R // 8,)),
    "swap_axes_flag_rows": lambda: _rows_case(U.swap_axes_flag, dict(BM=8, HALF=16),
                                              grid=(2 * R // 8,),
                                              extra=lambda W: dict(col_major=0)),
    "swap_axes_flag_cols": lambda: _rows_case(U.swap_axes_flag, dict(BM=8, HALF=16),
                                              grid=(2 * R // 8,),
                                              extra=lambda W: dict(col_major=1)),
    "carried_count_rows": lambda: _rows_case(U.carried_count_rows, dict(BM=8, BLOCK=32),
                                             grid=(2,)),
    "bool_split_rows": lambda: _tiles(U.bool_split_rows, dict(BM=8, BLOCK=32, HALF=3)),
    "causal_row_sums": lambda: _tiles(U.causal_row_sums),
    "perm3d_rows": _perm3d,
    "perm3d_rows_masked": _perm3d_masked,
    "bhsd_tiles": _bhsd,
    "bhsd_tiles_cx": lambda: _bhsd(cx=True),
    "batch_axis2_rows": _batch_axis2,
    "broadcast_row_add": lambda: _tiles(U.broadcast_row_add),
    "where_clamped_rows": lambda: _tiles(U.where_clamped_rows, C=24, binds=_both((R, 24))),
    "where_clamped_store": lambda: _tiles(U.where_clamped_store, C=24, binds=_both((R, 24))),
    "bp_col_major_one_check": lambda: _bp(U.bp_col_major_one_check, 40, 64),
    "bp_rows_unchecked": lambda: _bp(U.bp_rows_unchecked, 40, 64),
    "desc_straddle": _desc,
    "bp_advance_gemm": lambda: _gemm(U.bp_advance_gemm),
    "carried_ptr_store": lambda: _rows_case(U.carried_ptr_store, dict(BM=1, BLOCK=16), C=48,
                                            binds=_both((R, 48))),
    "carried_ptr_half_step": lambda: _rows_case(U.carried_ptr_half_step, dict(BM=1, BLOCK=16),
                                                C=48, binds=_both((R, 48))),
    "static_unrolled_halves": lambda: _rows_case(U.static_unrolled_halves,
                                                 dict(BLOCK=16, PARTS=3)),
    "pid_branch_stores": lambda: _tiles(U.pid_branch_stores),
    "pid_guarded_store": lambda: _tiles(U.pid_guarded_store, extra=lambda W: dict(n_valid=6)),
    "pid_guarded_store_part": lambda: _tiles(U.pid_guarded_store,
                                             extra=lambda W: dict(n_valid=4)),
    "two_params_one_output": _two_params,
    "gather_beside_store": _gather,
    "partial_epilogue": lambda: _tiles(U.partial_epilogue),
    "dot_trans_a": lambda: _gemm_case(
        U.dot_trans_a, K=48, b_shape=(48, 32), extra_types=dict(at_ptr="*fp32"),
        extra_args=lambda W: dict(at_ptr=_per_rank((48, 48), 1, W)),
        binds=(Bind("at_ptr", (48, 48), (0, 1)), Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_ak=48, stride_bk=32, stride_cm=32),
    "splitk_semaphore": lambda: _gemm_case(
        U.splitk_semaphore, K=64, grid=(6, 2), cx=dict(BM=16, BN=16, BK=16, SPLIT=2),
        extra_types=dict(sem_ptr="*i32"),
        extra_args=lambda W: dict(sem_ptr=_zeros((6,), np.int32)),
        binds=(Bind("a_ptr", (48, 64), (0, 1)), Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=64, stride_bk=32, stride_cm=32),
}

_NOT_A_GRID = ("LaunchError", "the launch's tiles do not form a grid along the coordinate")
_NEVER = ("LaunchError", "is never stored in a launch of grid")
_SPIN = ("CompileError", "this while loop repeats until a value it reads atomically")


def _unbounded(var: str):
    return ("CompileError", f"stays inside the dim: its start %{var} is not bounded")


def _hint(through: str):
    return ("CompileError", f"cannot follow index arithmetic through '{through}'.*Add "
                            f"`syncopate.language.hint_region2")


#: case -> {bound parameter: expected outcome} (tests/probe_helpers.py)
EXPECT = {
    # tile enumerations that are not grids: the remap moved programs onto tiles the launch
    # does not compute (mismatches before the launch check) and the produced tensor's
    # chunks never completed (deadlocks before the coverage check); both refused at launch
    "tril_block_gemm": dict(a_ptr=_NOT_A_GRID, b_ptr=_NOT_A_GRID, c_ptr=_NEVER),
    "row_window": dict(x_ptr=CLEAN, y_ptr=_NEVER),
    "persistent_fixed_sms": dict(x_ptr=CLEAN, y_ptr=_NEVER),
    "persistent_fixed_sms_full": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "pid_in_data": dict(x_ptr=_NOT_A_GRID, y_ptr=CLEAN),
    "swap_axes_flag_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "swap_axes_flag_cols": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    # its tile loop carries a count: not remapped (rank 1's rows were wrong before)
    "carried_count_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    # a tile coordinate from `(pid >= HALF).to(tl.int32)`: the waits rebuilt the boolean
    # sign-extended (true = -1) and waited for another chunk than the tile's (read before
    # arrival, before)
    "bool_split_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "causal_row_sums": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    # false refusals: a program id as an inner-dim index with no mask is bounded only by the
    # grid, a remainder by a run-time argument (`bh % H`) not at all
    "perm3d_rows": dict(x_ptr=_unbounded("m"), y_ptr=_unbounded("m")),
    "perm3d_rows_masked": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "bhsd_tiles": dict(x_ptr=_unbounded("h"), y_ptr=_unbounded("h")),
    "bhsd_tiles_cx": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "batch_axis2_rows": dict(x_ptr=_unbounded("b"), y_ptr=_unbounded("b")),
    "broadcast_row_add": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    # offsets chosen by tl.where: the analysis does not follow a select (a hint states the box)
    "where_clamped_rows": dict(x_ptr=_hint("arith.select"), y_ptr=CLEAN),
    "where_clamped_store": dict(x_ptr=_hint("arith.select"), y_ptr=_hint("arith.select")),
    "bp_col_major_one_check": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "bp_rows_unchecked": dict(
        x_ptr=("CompileError", r"reads indices \[0, 64\), past the end of the dim"),
        y_ptr=("CompileError", r"writes indices \[0, 64\), past the end of the dim")),
    "desc_straddle": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "bp_advance_gemm": dict(a_ptr=CLEAN, b_ptr=CLEAN, c_ptr=CLEAN),
    "carried_ptr_store": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "carried_ptr_half_step": dict(
        x_ptr=("CompileError", r"its start 8\*iter\(scf.for\) is not bounded; its mask bounds "
                               r"the index along it only by"),
        y_ptr=("CompileError", r"its start 8\*iter\(scf.for\) is not bounded; its mask bounds "
                               r"the index along it only by")),
    "static_unrolled_halves": dict(x_ptr=CLEAN, y_ptr=(
        "CompileError", "may both store the same elements of 'y_ptr'")),
    "pid_branch_stores": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "pid_guarded_store": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "pid_guarded_store_part": dict(x_ptr=CLEAN, y_ptr=_NEVER),
    # each half of the output through its own parameter: each store is masked by a computed
    # bound (M // 2), not an argument at the dim's end (a false refusal, and the harness
    # cannot pass one buffer as both parameters: docs/soundness.md, "Known limits")
    "two_params_one_output": dict(x_ptr=CLEAN, y_ptr=(
        "CompileError", r"masked along dim 0 by `index < %half`, a bound that is not the dim's "
                        r"end"), y_hi_ptr=(
        "CompileError", r"masked along dim 0 by `index < (%M \+ -1\*%half|-1\*%half \+ %M)`")),
    "gather_beside_store": dict(x_ptr=_hint("tt.load"), y_ptr=CLEAN),
    # `cols < n_cols - 1` is a launch-time equality n_cols == 33: stores only 32 of 33
    # columns of a 32-column tensor otherwise
    "partial_epilogue": dict(x_ptr=CLEAN, y_ptr=(
        "LaunchRequirementError", r"n_cols=32 \(the kernel was compiled for n_cols == 33")),
    "dot_trans_a": dict(at_ptr=CLEAN, c_ptr=CLEAN),
    "splitk_semaphore": dict(a_ptr=_SPIN, c_ptr=_SPIN),
}


def test_every_case_and_binding_has_an_expectation():
    check_expectations_cover(CASES, EXPECT)


@pytest.mark.parametrize("name,param,i,backend", items(CASES, EXPECT))
def test_probe_kernel(name, param, i, backend):
    probe(CASES[name](), param, i, backend, EXPECT[name][param], "unseen4.py")


# -------------------------------------------------- tile enumerations that are not grids

#: (case, parameter): kernels whose programs do not visit every value of the tile coordinate
#: with the same other coordinates on the probe's launch; carried_count_rows's tile loop
#: carries a value, so it is not remapped at all
NON_GRIDS = [("tril_block_gemm", "a_ptr"), ("tril_block_gemm", "b_ptr"),
             ("row_window", "x_ptr"), ("persistent_fixed_sms", "x_ptr"),
             ("pid_in_data", "x_ptr"), ("pid_in_data", "y_ptr"), ("pid_branch_stores", "x_ptr"),
             ("carried_count_rows", "x_ptr")]


def _emulate(case, bind, sched, remap=True):
    return emulate(case.fn, signature=signature(case), constexprs=case.cx, schedule=sched,
                   operand=bind.param, grid=case.grid, args=case.args(sched.world_size),
                   backend="sm", comm_programs=2, policies=("in-order",), launches=1,
                   check=False, remap=remap)


@pytest.mark.parametrize("name,param", NON_GRIDS)
def test_remap_of_a_non_grid_is_refused_at_launch_or_not_made(name, param):
    """Every all-gather and ring pass of the tensor (every reduce-scatter and all-reduce of a
    produced one), for 2 and 3 ranks: the remapped kernel
    computed other tiles than the kernel (rank 1's rows mismatched before); now the launch is
    refused, naming the coordinate's line and asking for remap=False, unless the remap is not
    made (a table that keeps the launch's tiles, or a coordinate the pass does not remap);
    with remap=False every schedule emulates clean."""
    case = CASES[name]()
    bind = next(b for b in case.binds if b.param == param)
    refused = 0
    for W in (2, 3):
        for label, sched in schedules(bind, W, "fp32", full=False):
            if label.startswith("all_to_all"):
                continue
            try:
                res = _emulate(case, bind, sched)
            except LaunchError as e:
                assert re.search(_NOT_A_GRID[1], str(e)) and "unseen4.py:" in str(e), (label, e)
                refused += 1
                res = _emulate(case, bind, sched, remap=False)
            assert res.ok and not any(s["deadlocked"] for s in res.stats.values()), \
                (W, label, res.summary())
    assert (refused == 0) == (name == "carried_count_rows"), refused


@pytest.mark.parametrize("W", (2, 3))
def test_boolean_tile_coordinate_waits_for_its_chunk(W):
    """bool_split_rows in its written order (remap=False, so the waits test the kernel's own
    coordinate): the waits rebuilt `(pid >= HALF).to(tl.int32)` sign-extended (true = -1), so
    the programs of the second half waited for no chunk and read rows before they arrived."""
    case = CASES["bool_split_rows"]()
    for mode in ("pull", "push"):
        res = _emulate(case, case.binds[0], all_gather((R, C), "fp32", W, mode=mode, split=2),
                       remap=False)
        assert res.ok and res.stats, res.summary()


#: produced tensors a launch of the probe's grid does not store whole
NEVER_STORED = [("tril_block_gemm", "c_ptr"), ("row_window", "y_ptr"),
                ("persistent_fixed_sms", "y_ptr"), ("pid_guarded_store_part", "y_ptr")]


@pytest.mark.parametrize("W", (2, 3))
@pytest.mark.parametrize("name,param", NEVER_STORED)
def test_element_never_stored_is_refused_at_launch(name, param, W):
    """Every schedule that produces the tensor (reduce-scatter in every mode and split,
    all-reduce, along each dim): the chunks holding the elements the launch never stores
    never left, and the fused kernel waited for them forever (an emulated deadlock before);
    now the launch is refused before anything runs, naming the store's line."""
    case = CASES[name]()
    bind = next(b for b in case.binds if b.param == param)
    src, first = inspect.getsourcelines(case.fn.fn)
    lines = [first + i for i, text in enumerate(src) if "tl.store(" in text]
    for label, sched in schedules(bind, W, "fp32"):
        with pytest.raises(LaunchError, match=_NEVER[1]) as e:
            run(case, bind, sched, "sm", ("in-order",))
        assert any(f"unseen4.py:{n}:" in str(e.value) for n in lines), (label, e.value)
