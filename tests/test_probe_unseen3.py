"""Issue 28's probe, third round: the kernels of ``tests/corpus/unseen3.py`` (programs that talk
to each other, lying hints, aliasing and wrapping views, register-level tile ops, memory-op
modifiers, inline assembly, loop knobs), each fused with the schedules that could move one of
its tensors, emulated for 2 and 3 ranks over 2 launches under several interleavings, and
compared with the unfused kernel -- the harness of the second round (``tests/probe_helpers.py``)
on a cheap slice: one schedule per case and binding, the template, W, mode and backend rotating.
The tilings that store an element of a produced tensor twice in a launch (:data:`OVERLAPS`)
are refused at launch under every schedule that produces it.

:data:`EXPECT` says what each kernel and binding must give: emulated clean, or refused with a
typed error whose message matches (a CompileError names the kernel's line, ``unseen3.py:N``).
A case the compiler accepts but that races, mismatches, deadlocks or raises a raw Python
exception is a finding.
"""

from __future__ import annotations

import inspect
from typing import Callable

import numpy as np
import pytest

from syncopate.emulate.reference import run_grid
from syncopate.emulate.scheduler import SPIN_TURN, Co, Scheduler
from syncopate.errors import EmulationError, LaunchError

from corpus import unseen3 as U
from probe_helpers import (CLEAN, LIMIT, Bind, Case, _gemm_case, _per_rank, _rows_case, _zeros,
                           check_expectations_cover, items, probe, run, schedules)

R, C = 48, 32


def _local(**kw):
    """Extra local (not communicated) buffers: name -> (shape, dtype)."""
    return lambda W: {k: _zeros(*v) for k, v in kw.items()}


def _i32(**kw):
    return {k: "*i32" for k in kw}


def _tiles(fn, cx=None, **kw):
    """A row-tile kernel: ``BM`` rows a program (8 unless ``cx`` says), ``R / BM`` programs."""
    cx = cx or dict(BM=8, BLOCK=32)
    return _rows_case(fn, cx, grid=(R // cx["BM"],), **kw)


CASES: dict[str, Callable[[], Case]] = {
    "lookback_scan_rows": lambda: _tiles(
        U.lookback_scan_rows, dict(BM=16, BLOCK=32), extra=_local(agg_ptr=((8,), np.float32), flag_ptr=((8,), np.int32)),
        extra_types=dict(agg_ptr="*fp32", flag_ptr="*i32")),
    "spin_lock_count": lambda: _tiles(
        U.spin_lock_count, extra=_local(lock_ptr=((1,), np.int32), cnt_ptr=((1,), np.int32)),
        extra_types=_i32(lock_ptr=1, cnt_ptr=1)),
    "grid_barrier_norm": lambda: _tiles(
        U.grid_barrier_norm, dict(BM=16, BLOCK=32), extra=_local(gmax_ptr=((1,), np.float32),
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
    "volatile_flag_rows": lambda: _tiles(
        U.volatile_flag_rows, extra=_local(flag_ptr=((1,), np.int32)), extra_types=_i32(flag_ptr=1)),
    # node p's successor is p + 1, the last one's -1: program p walks R/8 - p hops
    "chased_rows": lambda: _tiles(
        U.chased_rows, extra=lambda W: dict(next_ptr=np.append(np.arange(1, R // 8), -1).astype(
            np.int32)), extra_types=_i32(next_ptr=1)),
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

_ASM = (LIMIT, "the emulator does not run inline PTX", EmulationError)


def _unemulated(op: str):
    """The expectation of a case whose kernel holds ``op``, which the emulator does not run."""
    return (LIMIT, f"the emulator does not implement {op}", EmulationError)


_SPIN = ("CompileError", "this while loop repeats until a value it reads atomically or "
                         "volatilely changes: a program waiting for another")
_TWO_ARGS = "an offset term multiplies two integer arguments"

#: case -> {bound parameter: expected outcome} (tests/probe_helpers.py)
EXPECT = {
    # programs that wait for each other (a spin on an atomic or a volatile load) are refused
    # whatever the schedule: the fused grid's comm programs and tile order break the residency
    # and order they rely on (check-accesses); a shared counter without a wait is fused
    "lookback_scan_rows": dict(x_ptr=_SPIN, y_ptr=_SPIN),
    "spin_lock_count": dict(x_ptr=_SPIN, y_ptr=_SPIN),
    "grid_barrier_norm": dict(x_ptr=_SPIN, y_ptr=_SPIN),
    "volatile_flag_rows": dict(x_ptr=_SPIN, y_ptr=_SPIN),
    "chased_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "last_program_total": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "ticket_order_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    # the hints are not trusted: the stride-2 index is seen for what it is
    "lying_contiguity": dict(
        x_ptr=("CompileError", "this tt.load steps through dim 1 of the communicated tensor by 2 "
                               "elements per tile element"),
        y_ptr=("CompileError", "this tt.store steps through dim 1 of the communicated tensor by "
                               "2 elements")),
    "assumed_bound_nomask": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "assumed_row_range": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "strided_view_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "strided_view_broadcast": dict(
        x_ptr=("LaunchRequirementError", r"stride_x=0 \(the kernel was compiled for "
                                         r"stride_x == 32"),
        y_ptr=CLEAN),
    "negative_stride_rows": dict(x_ptr=("CompileError", _TWO_ARGS + r" \(M \* stride\)"),
                                 y_ptr=CLEAN),
    "int32_wrap_rows": dict(x_ptr=("CompileError", _TWO_ARGS + r" \(wrap \* wrap\)"),
                            y_ptr=CLEAN),
    "concat_into_self": dict(x_ptr=("CompileError", _TWO_ARGS + r" \(M \* stride\)")),
    "gather_permute_rows": dict(x_ptr=_unemulated("tt.gather"), y_ptr=_unemulated("tt.gather")),
    "interleave_halves": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "reshape_permute_tile": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "sort_flip_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "histogram_rows": dict(x_ptr=_unemulated("tt.histogram"), y_ptr=_unemulated("tt.histogram")),
    "reverse_scans_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "modifiers_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "desc_half_stores": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "bp_nan_padding": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "asm_pure_rows": dict(x_ptr=_ASM, y_ptr=_ASM),
    "asm_store_rows": dict(x_ptr=_ASM, y_ptr=(
        "CompileError", "this tt.elementwise_inline_asm takes a value computed from 'y_ptr'.*"
                        "inline assembly may load or store through the pointer")),
    "libdevice_rows": dict(x_ptr=_unemulated("tt.extern_elementwise"),
                           y_ptr=_unemulated("tt.extern_elementwise")),
    # the loop runs up to a loaded length: the rest of each row was never stored and its chunk
    # never left (a deadlock before check-accesses' loop-trip rule)
    "while_loaded_bound": dict(x_ptr=CLEAN, y_ptr=(
        "CompileError", "moves with the loop at .* whose number of iterations depends on a "
                        "value loaded from memory")),
    # the unrolled copies of the store (loop_unroll_factor=2) and the remainder loop's are
    # not disjoint by their starts' constant gap (the copies are, within an iteration; the
    # loops are not): the launch check evaluates their boxes (before, a refusal)
    "flattened_loops": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "swizzle2d_persistent_gemm": dict(a_ptr=CLEAN, c_ptr=CLEAN),
    "nested_if_returns": dict(x_ptr=CLEAN, y_ptr=CLEAN),
}

def test_every_case_and_binding_has_an_expectation():
    check_expectations_cover(CASES, EXPECT)


@pytest.mark.parametrize("name,param,i,backend", items(CASES, EXPECT))
def test_probe_kernel(name, param, i, backend):
    probe(CASES[name](), param, i, backend, EXPECT[name][param], "unseen3.py")


# ------------------------------------------ tilings that store an element twice in a launch

_OVER = (Bind("y_ptr", (48, 48), (0, 1), True),)

#: kernels whose stores of a produced tensor overlap across loop iterations or programs (each
#: store's box is its own in a program and an iteration): the chunk's count, one store per
#: element, reached its target before its last value was stored (early-signal races and
#: mismatches, before the launch check)
OVERLAPS: dict[str, Callable[[], Case]] = {
    "overlap_step": lambda: _rows_case(U.overlap_step, dict(BM=1, BLOCK=16), C=48,
                                       binds=_OVER),
    "shifted_pair": lambda: _rows_case(U.shifted_pair, dict(BM=1, BLOCK=16), C=48,
                                       binds=_OVER),
    "grid_overlap": lambda: _rows_case(U.grid_overlap, dict(BM=4, BLOCK=64), C=48,
                                       grid=(2 * R // 4,), binds=_OVER),
    "persistent_overlap": lambda: _rows_case(U.persistent_overlap, dict(BM=4, BLOCK=64),
                                             C=48, grid=(4,), binds=_OVER),
}


@pytest.mark.parametrize("W", (2, 3))
@pytest.mark.parametrize("name", sorted(OVERLAPS))
def test_element_stored_twice_is_refused_at_launch(name, W):
    """Every schedule that produces the tensor (reduce-scatter in every mode and split,
    all-reduce, along each dim) refuses the launch before anything runs, naming the store's
    line in the kernel."""
    case = OVERLAPS[name]()
    src, first = inspect.getsourcelines(case.fn.fn)
    lines = [first + i for i, text in enumerate(src) if "tl.store(" in text]
    for label, sched in schedules(case.binds[0], W, "fp32"):
        with pytest.raises(LaunchError, match="is stored twice in one launch") as e:
            run(case, case.binds[0], sched, "sm", ("in-order",))
        assert any(f"unseen3.py:{n}:" in str(e.value) for n in lines), (label, e.value)


# ------------------------------------------------------------------ the emulator's fairness

class _Flag:
    """A spinning program and the one that releases it: ``spin`` yields (one emulated atomic
    a turn) until ``set`` has run, and fails once it has spun ``limit`` turns (starved)."""

    def __init__(self, limit: int):
        self.up, self.limit = False, limit

    def spin(self):
        for _ in range(self.limit):
            if self.up:
                return
            yield None
        raise AssertionError(f"the spinning program was starved for {self.limit} turns")

    def set(self):
        yield None
        self.up = True


@pytest.mark.parametrize("policy", ["in-order", "reverse"])
def test_scheduler_lets_a_waited_for_program_run(policy):
    """A program spinning on a flag that a program of lower priority sets: ``in-order`` (the
    spinner has the lower id) and ``reverse`` (the higher) picked the spinner forever, so
    lookback_scan_rows livelocked in the emulator (before: 20M steps, hours). Now it is marked
    spinning after SPIN_TURN turns and the setter runs."""
    flag = _Flag(limit=20 * SPIN_TURN)
    s = Scheduler(policy)
    first, second = (flag.spin(), flag.set()) if policy == "in-order" else \
        (flag.set(), flag.spin())
    s.spawn(Co(first, 0, "compute", 0, "program 0"))
    s.spawn(Co(second, 0, "compute", 1, "program 1"))
    assert s.run() == []
    assert flag.up


def test_reference_grid_runs_a_program_its_first_one_waits_for():
    """The unfused reference ran programs one after another to completion, so a program that
    waits for a later one (grid_barrier_norm: everyone waits for the last arrival) looped
    forever; now it yields its turn after SPIN_TURN atomics."""
    flag = _Flag(limit=20 * SPIN_TURN)

    class Code:  # program 0 spins, program 1 sets the flag
        @staticmethod
        def call(args, ctx):
            return flag.spin() if ctx.pid[0] == 0 else flag.set()
    run_grid(Code, [], (2,))
    assert flag.up


def test_reference_grid_that_never_finishes_is_an_error():
    """A barrier for more programs than the grid has never opens: a typed error, not a hang."""
    class Code:
        @staticmethod
        def call(args, ctx):
            return _Flag(limit=10 ** 9).spin()
    with pytest.raises(EmulationError, match=r"the unfused kernel did not finish: program "
                                             r"\(0, 0, 0\) and 1 other\(s\) still wait"):
        run_grid(Code, [], (2,), max_steps=20 * SPIN_TURN)
