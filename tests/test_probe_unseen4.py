"""Issue 28's probe, fourth round: the kernels of ``tests/corpus/unseen4.py``, each fused with
the schedules that could move one of its tensors, emulated for 2 and 3 ranks over 2 launches
under several interleavings, and compared with the unfused kernel (``tests/probe_helpers.py``,
one schedule per case and binding, the template, W, mode and backend rotating).

:data:`EXPECT` says what each kernel and binding must give: emulated clean, or refused with a
typed error whose message matches (a CompileError names the kernel's line, ``unseen4.py:N``).
A case the compiler accepts but that races, mismatches, deadlocks or raises a raw Python
exception is a finding.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from corpus import unseen4 as U
from probe_helpers import (CLEAN, Bind, Case, _gemm_case, _per_rank, _rows_case, _zeros,
                           check_expectations_cover, items, probe)

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


def _bhsd():
    B, H, S, D = 2, 3, 16, 8
    return Case(U.bhsd_tiles, dict(BS=8, BD=8), dict(x_ptr="*fp32", y_ptr="*fp32"),
                lambda W: dict(x_ptr=_per_rank((B, H, S, D), 1, W), y_ptr=_zeros((B, H, S, D)),
                               H=H, S=S, D=D, sb=H * S * D, sh=S * D, ss=D),
                (S // 8, B * H), _both((B, H, S, D), (0, 1, 2)))


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
                                              grid=(2 * R // 8,), extra=lambda W: dict(col_major=0)),
    "swap_axes_flag_cols": lambda: _rows_case(U.swap_axes_flag, dict(BM=8, HALF=16),
                                              grid=(2 * R // 8,), extra=lambda W: dict(col_major=1)),
    "causal_row_sums": lambda: _tiles(U.causal_row_sums),
    "perm3d_rows": _perm3d,
    "bhsd_tiles": _bhsd,
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

EXPECT: dict = {name: {b.param: CLEAN for b in make().binds} for name, make in CASES.items()}


def test_every_case_and_binding_has_an_expectation():
    check_expectations_cover(CASES, EXPECT)


@pytest.mark.parametrize("name,param,i,backend", items(CASES, EXPECT))
def test_probe_kernel(name, param, i, backend):
    probe(CASES[name](), param, i, backend, EXPECT[name][param], "unseen4.py")
