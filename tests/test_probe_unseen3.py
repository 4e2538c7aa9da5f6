"""Issue 28's probe, third round: the kernels of ``tests/corpus/unseen3.py`` (programs that talk
to each other, lying hints, aliasing and wrapping views, register-level tile ops, memory-op
modifiers, inline assembly, loop knobs), each fused with the schedules that could move one of
its tensors, emulated for 2 and 3 ranks over 2 launches under several interleavings, and
compared with the unfused kernel -- the harness of the second round (``tests/probe_helpers.py``)
on a cheap slice: one schedule per case and binding, the template, W, mode and backend rotating.

:data:`EXPECT` says what each kernel and binding must give: emulated clean, or refused with a
typed error whose message matches (a CompileError names the kernel's line, ``unseen3.py:N``).
A case the compiler accepts but that races, mismatches, deadlocks or raises a raw Python
exception is a finding.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from corpus import unseen3 as U
from probe_helpers import (CLEAN, LIMIT, Bind, Case, _gemm_case, _per_rank, _rows_case, _zeros,
                           check_expectations_cover, items, probe)

R, C = 48, 32


def _local(**kw):
    """Extra local (not communicated) buffers: name -> (shape, dtype)."""
    return lambda W: {k: _zeros(*v) for k, v in kw.items()}


def _i32(**kw):
    return {k: "*i32" for k in kw}


def _tiles(fn, cx=None, **kw):
    """A row-tile kernel: ``BM = 8`` rows a program, 6 programs."""
    return _rows_case(fn, cx or dict(BM=8, BLOCK=32), grid=(R // 8,), **kw)


CASES: dict[str, Callable[[], Case]] = {
    "lookback_scan_rows": lambda: _tiles(
        U.lookback_scan_rows, extra=_local(agg_ptr=((8,), np.float32), flag_ptr=((8,), np.int32)),
        extra_types=dict(agg_ptr="*fp32", flag_ptr="*i32")),
    "spin_lock_count": lambda: _tiles(
        U.spin_lock_count, extra=_local(lock_ptr=((1,), np.int32), cnt_ptr=((1,), np.int32)),
        extra_types=_i32(lock_ptr=1, cnt_ptr=1)),
    "grid_barrier_norm": lambda: _tiles(
        U.grid_barrier_norm, extra=_local(gmax_ptr=((1,), np.float32),
                                          bar_ptr=((1,), np.int32)),
        extra_types=dict(gmax_ptr="*fp32", bar_ptr="*i32")),
    "last_program_total": lambda: _tiles(
        U.last_program_total, dict(BM=8, BLOCK=32, NP=8),
        extra=_local(part_ptr=((8 * 32,), np.float32), cnt_ptr=((1,), np.int32),
                     tot_ptr=((32,), np.float32)),
        extra_types=dict(part_ptr="*fp32", cnt_ptr="*i32", tot_ptr="*fp32")),
    "ticket_order_rows": lambda: _tiles(
        U.ticket_order_rows, extra=_local(ticket_ptr=((1,), np.int32)),
        extra_types=_i32(ticket_ptr=1)),
    "lying_contiguity": lambda: _tiles(U.lying_contiguity),
    "assumed_bound_nomask": lambda: _rows_case(U.assumed_bound_nomask, dict(BLOCK=32)),
    "assumed_row_range": lambda: _tiles(U.assumed_row_range),
    "strided_view_rows": lambda: _rows_case(
        U.strided_view_rows, dict(BLOCK=32), extra=lambda W: dict(stride_x=C, stride_y=C)),
    # the same kernel launched on a broadcast view of x (stride 0: every row is row 0)
    "strided_view_broadcast": lambda: _rows_case(
        U.strided_view_rows, dict(BLOCK=32), extra=lambda W: dict(stride_x=0, stride_y=C)),
    "negative_stride_rows": lambda: _rows_case(U.negative_stride_rows, dict(BLOCK=32)),
    "int32_wrap_rows": lambda: _rows_case(U.int32_wrap_rows, dict(BLOCK=32),
                                          extra=lambda W: dict(wrap=65536)),
    "concat_into_self": lambda: Case(
        U.concat_into_self, dict(BLOCK=32), dict(x_ptr="*fp32"),
        lambda W: dict(x_ptr=_per_rank((2 * R, C), 1, W), M=R, n_cols=C, stride=C), (R,),
        (Bind("x_ptr", (R, C), (0, 1)),)),
    "gather_permute_rows": lambda: _tiles(
        U.gather_permute_rows, extra_types=_i32(perm_ptr=1),
        extra=lambda W: dict(perm_ptr=np.random.default_rng(3).permutation(C).astype(np.int32))),
    "interleave_halves": lambda: _tiles(U.interleave_halves, dict(BM=8, HALF=16)),
    "reshape_permute_tile": lambda: _tiles(U.reshape_permute_tile),
    "sort_flip_rows": lambda: _tiles(U.sort_flip_rows),
    "histogram_rows": lambda: _rows_case(
        U.histogram_rows, dict(BLOCK=32, BINS=8), out_shape=(R, 8),
        binds=(Bind("x_ptr", (R, C), (0, 1)), Bind("y_ptr", (R, 8), (0,), True))),
    "reverse_scans_rows": lambda: _tiles(U.reverse_scans_rows),
    "modifiers_rows": lambda: _tiles(U.modifiers_rows),
    "desc_half_stores": lambda: Case(
        U.desc_half_stores, dict(BM=16, BN=32), dict(x_ptr="*fp32", y_ptr="*fp32"),
        lambda W: dict(x_ptr=_per_rank((R, C), 1, W), y_ptr=_zeros((R, C)), M=R, N=C),
        (R // 16,), (Bind("x_ptr", (R, C), (0,)), Bind("y_ptr", (R, C), (0,), True))),
    "bp_nan_padding": lambda: Case(
        U.bp_nan_padding, dict(BM=16, BN=64), dict(x_ptr="*fp32", y_ptr="*fp32"),
        lambda W: dict(x_ptr=_per_rank((R, 40), 1, W), y_ptr=_zeros((R, 40)), M=R, N=40,
                       stride=40),
        (R // 16,), (Bind("x_ptr", (R, 40), (0, 1)), Bind("y_ptr", (R, 40), (0, 1), True))),
    "asm_pure_rows": lambda: _tiles(U.asm_pure_rows),
    "asm_store_rows": lambda: _rows_case(U.asm_store_rows, dict(BLOCK=32)),
    "libdevice_rows": lambda: _tiles(U.libdevice_rows),
    "while_loaded_bound": lambda: _rows_case(
        U.while_loaded_bound, dict(BLOCK=16), C=40, extra_types=_i32(len_ptr=1),
        extra=lambda W: dict(len_ptr=np.random.default_rng(9).integers(0, 60, R).astype(np.int32)),
        binds=(Bind("x_ptr", (R, 40), (0, 1)), Bind("y_ptr", (R, 40), (0,), True))),
    "flattened_loops": lambda: _rows_case(
        U.flattened_loops, dict(BM=8, BLOCK=16, ROWS=4), C=40, grid=(R // 4,),
        binds=(Bind("x_ptr", (R, 40), (0, 1)), Bind("y_ptr", (R, 40), (0,), True))),
    "swizzle2d_persistent_gemm": lambda: _gemm_case(
        U.swizzle2d_persistent_gemm, K=32, grid=(4,),
        cx=dict(BM=16, BN=16, BK=16, GROUP_M=2, NUM_SMS=4),
        binds=(Bind("a_ptr", (48, 32), (0, 1)), Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=32, stride_bk=32, stride_cm=32),
    "nested_if_returns": lambda: _tiles(U.nested_if_returns, extra=lambda W: dict(mode=1)),
}

EXPECT = {name: {b.param: CLEAN for b in make().binds} for name, make in CASES.items()}


def test_every_case_and_binding_has_an_expectation():
    check_expectations_cover(CASES, EXPECT)


@pytest.mark.parametrize("name,param,i,backend", items(CASES, EXPECT))
def test_probe_kernel(name, param, i, backend):
    probe(CASES[name](), param, i, backend, EXPECT[name][param], "unseen3.py")
