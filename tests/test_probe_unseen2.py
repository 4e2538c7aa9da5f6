"""Issue 28's probe, second round: the kernels of ``tests/corpus/unseen2.py`` (styles the project
had not seen), each fused with the schedules that could move one of its tensors, emulated for 2
and 3 ranks over 2 launches under several interleavings, and compared with the unfused kernel.

:data:`CASES` says how to launch each kernel (shapes, arguments, grid) and which of its tensors
a schedule may move (:class:`Bind`: consumed, so all-gather / ring pass / all-to-all along each
dim; or produced, so reduce-scatter / all-reduce).  :data:`EXPECT` says what each kernel and
binding must give: emulated clean, or refused with a message phrase (the refusal must name the
kernel's line, ``unseen2.py:N``).  The whole grid (every template, mode, split, backend and W)
was probed once (the report of branch ``probe-kernels``); the test walks every case and binding
on a cheap slice of it (one schedule per template, W = 2 and 3 alternating, fewer policies), so
that it stays within a couple of minutes on 2 cores.  The harness (``Bind``, ``Case``, the
slice's schedules, :func:`probe_helpers.probe`) is ``tests/probe_helpers.py``, shared with the
third round.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import pytest

from syncopate.errors import EmulationError, SyncopateError
from syncopate.schedule import all_gather, all_to_all, reduce_scatter

from corpus import unseen2 as U
from probe_helpers import (CLEAN, LIMIT, Bind, Case, _gemm_case, _per_rank, _rows_case, _zeros,
                           check_expectations_cover, items, probe, run)


# ------------------------------------------------------------------------- the cases

def _embedding(fn):
    V, D, B, L = 48, 32, 12, 40

    def args(W):
        rng = np.random.default_rng(5)
        cuts = np.sort(rng.choice(np.arange(1, L), B - 1, replace=False))
        off = np.concatenate([[0], cuts, [L]]).astype(np.int32)
        return dict(w_ptr=_per_rank((V, D), 1, W), idx_ptr=rng.integers(0, V, L).astype(np.int32),
                    off_ptr=off, out_ptr=_zeros((B, D)), dim=D, stride_w=D)
    return Case(fn, dict(BLOCK=32), dict(w_ptr="*fp32", idx_ptr="*i32", off_ptr="*i32",
                                         out_ptr="*fp32"), args, (B,),
                (Bind("w_ptr", (V, D), (0, 1)), Bind("out_ptr", (B, D), (0,), True)))


def _lens(W):
    return dict(len_ptr=np.random.default_rng(9).integers(0, 41, 48).astype(np.int32))


CASES: dict[str, Callable[[], Case]] = {
    "gemm_bias_gelu_2d": lambda: _gemm_case(
        U.gemm_bias_gelu_2d, grid=(3, 2), extra_types=dict(bias_ptr="*fp32"),
        extra_args=lambda W: dict(bias_ptr=_per_rank((32,), 3, W)),
        binds=(Bind("a_ptr", (48, 48), (0, 1)), Bind("b_ptr", (48, 32), (0, 1)),
               Bind("bias_ptr", (32,), (0,)), Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=48, stride_ak=1, stride_bk=32, stride_bn=1, stride_cm=32, stride_cn=1),
    "batched_gemm_3d": lambda: Case(
        U.batched_gemm_3d, dict(BM=16, BN=16, BK=16),
        dict(a_ptr="*fp32", b_ptr="*fp32", c_ptr="*fp32"),
        lambda W: dict(a_ptr=_per_rank((6, 32, 16), 1, W), b_ptr=_per_rank((6, 16, 16), 2, W),
                       c_ptr=_zeros((6, 32, 16)), M=32, N=16, K=16, stride_ab=512, stride_am=16,
                       stride_bb=256, stride_bk=16, stride_cb=512, stride_cm=16),
        (2, 1, 6), (Bind("a_ptr", (6, 32, 16), (0, 1)),
                    Bind("c_ptr", (6, 32, 16), (0, 1), True))),
    "splitk_atomic_workspace": lambda: _gemm_case(
        U.splitk_atomic_workspace, M=32, N=32, K=64, grid=(4, 2),
        cx=dict(BM=16, BN=16, BK=16, SPLIT_K=2),
        extra_types=dict(ws_ptr="*fp32", cnt_ptr="*i32"),
        extra_args=lambda W: dict(ws_ptr=_zeros((32, 32)), cnt_ptr=_zeros(4, np.int32)),
        binds=(Bind("a_ptr", (32, 64), (0, 1)), Bind("c_ptr", (32, 32), (0, 1), True)),
        stride_am=64, stride_bk=32, stride_cm=32),
    "persistent_bp_gemm": lambda: _gemm_case(
        U.persistent_bp_gemm, K=32, grid=(4,), cx=dict(BM=16, BN=16, BK=16, GROUP_M=2, NUM_SMS=4),
        binds=(Bind("a_ptr", (48, 32), (0, 1)), Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=32, stride_bk=32, stride_cm=32),
    "stream_k_counter_gemm": lambda: _gemm_case(
        U.stream_k_counter_gemm, K=32, grid=(3,), extra_types=dict(next_ptr="*i32"),
        extra_args=lambda W: dict(next_ptr=_zeros(1, np.int32)),
        binds=(Bind("a_ptr", (48, 32), (0, 1)), Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=32, stride_bk=32, stride_cm=32),
    "gemm_bt_trans": lambda: _gemm_case(
        U.gemm_bt_trans, b_shape=(32, 48), extra_types=dict(bt_ptr="*fp32"),
        extra_args=lambda W: dict(bt_ptr=_per_rank((32, 48), 2, W)),
        binds=(Bind("a_ptr", (48, 48), (0, 1)), Bind("bt_ptr", (32, 48), (0, 1)),
               Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=48, stride_btn=48, stride_cm=32),
    "gemm_init_then_store": lambda: _gemm_case(
        U.gemm_init_then_store, binds=(Bind("a_ptr", (48, 48), (0,)),
                                       Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=48, stride_bk=32, stride_cm=32),
    "relu_sparse_store": lambda: _gemm_case(
        U.relu_sparse_store, binds=(Bind("a_ptr", (48, 48), (0,)),
                                    Bind("c_ptr", (48, 32), (0, 1), True)),
        stride_am=48, stride_bk=32, stride_cm=32),
    "layernorm_rowloop": lambda: _rows_case(
        U.layernorm_rowloop, dict(BLOCK=16), C=40, extra_types=dict(w_ptr="*fp32", b_ptr="*fp32",
                                                                    eps="fp32"),
        extra=lambda W: dict(w_ptr=_per_rank((40,), 4, W), b_ptr=_per_rank((40,), 5, W),
                             eps=1e-5),
        binds=(Bind("x_ptr", (48, 40), (0, 1)), Bind("w_ptr", (40,), (0,)),
               Bind("y_ptr", (48, 40), (0, 1), True))),
    "softmax_online": lambda: _rows_case(U.softmax_online, dict(BLOCK=16), C=40),
    "softmax_three_pass": lambda: _rows_case(U.softmax_three_pass, dict(BLOCK=16), C=40,
                                             grid=(5,), n_rows_arg="n_rows"),
    "row_argmax_topk": lambda: _rows_case(
        U.row_argmax_topk, dict(BLOCK=32, K=4), extra_types=dict(idx_ptr="*i32", top_ptr="*fp32"),
        extra=lambda W: dict(idx_ptr=_zeros(48, np.int32), top_ptr=_zeros((48, 4))),
        binds=(Bind("x_ptr", (48, 32), (0, 1)), Bind("top_ptr", (48, 4), (0, 1), True))),
    "cumsum_rows": lambda: _rows_case(U.cumsum_rows, dict(BM=8, BLOCK=32), grid=(6,)),
    "transposed_read": lambda: Case(
        U.transposed_read, dict(BM=16, BN=16), dict(x_ptr="*fp32", y_ptr="*fp32"),
        lambda W: dict(x_ptr=_per_rank((32, 48), 1, W), y_ptr=_zeros((48, 32)), M=48, N=32,
                       stride_x0=1, stride_x1=48, stride_y=32),
        (3, 2), (Bind("x_ptr", (32, 48), (0, 1)), Bind("y_ptr", (48, 32), (0, 1), True))),
    "transposed_tile": lambda: Case(
        U.transposed_tile, dict(BM=16, BN=16), dict(x_ptr="*fp32", y_ptr="*fp32"),
        lambda W: dict(x_ptr=_per_rank((48, 32), 1, W), y_ptr=_zeros((32, 48)), M=48, N=32,
                       stride_x=32, stride_y=48),
        (2, 3), (Bind("x_ptr", (48, 32), (0, 1)), Bind("y_ptr", (32, 48), (0, 1), True))),
    "dequant_rows_int8": lambda: _rows_case(
        U.dequant_rows, dict(BLOCK=32), xtype="*i8", extra_types=dict(s_ptr="*fp32"),
        extra=lambda W: dict(s_ptr=_per_rank((48,), 3, W)),
        binds=(Bind("x_ptr", (48, 32), (0, 1)), Bind("s_ptr", (48,), (0,)),
               Bind("y_ptr", (48, 32), (0,), True))),
    "dequant_rows_fp8": lambda: _rows_case(
        U.dequant_rows, dict(BLOCK=32), xtype="*fp8e4nv", extra_types=dict(s_ptr="*fp32"),
        extra=lambda W: dict(s_ptr=_per_rank((48,), 3, W)),
        binds=(Bind("x_ptr", (48, 32), (0, 1)), Bind("y_ptr", (48, 32), (0,), True))),
    "where_pointer": lambda: _rows_case(
        U.where_pointer, dict(BLOCK=32), extra_types=dict(a_ptr="*fp32", b_ptr="*fp32"),
        extra=lambda W: dict(a_ptr=_per_rank((48, 32), 1, W), b_ptr=_per_rank((48, 32), 2, W),
                             split=20),
        binds=(Bind("a_ptr", (48, 32), (0, 1)), Bind("b_ptr", (48, 32), (0, 1)),
               Bind("y_ptr", (48, 32), (0,), True))),
    "hinted_int64_rows": lambda: _rows_case(U.hinted_int64_rows, dict(BM=16, BLOCK=32),
                                            grid=(3,)),
    "ragged_rows": lambda: _rows_case(
        U.ragged_rows, dict(BLOCK=16), C=40, extra=_lens, extra_types=dict(len_ptr="*i32"),
        binds=(Bind("x_ptr", (48, 40), (0, 1)), Bind("y_ptr", (48, 40), (0,), True))),
    "ragged_rows_bounded": lambda: _rows_case(
        U.ragged_rows_bounded, dict(BLOCK=16), C=40, extra=_lens,
        extra_types=dict(len_ptr="*i32")),
    "early_return_in_loop": lambda: _rows_case(U.early_return_in_loop,
                                               dict(BM=8, BLOCK=32, STEPS=4), grid=(3,)),
    "early_return_tree": lambda: _rows_case(U.early_return_tree, dict(BM=16, BLOCK=32), grid=(4,),
                                            extra=lambda W: dict(flag=1)),
    "bitcast_read_hinted": lambda: _rows_case(U.bitcast_read_hinted, dict(BLOCK=32),
                                              binds=(Bind("x_ptr", (48, 32), (0, 1)),)),
    "where_pointer_hinted": lambda: _rows_case(
        U.where_pointer_hinted, dict(BLOCK=32), extra_types=dict(a_ptr="*fp32", b_ptr="*fp32"),
        extra=lambda W: dict(a_ptr=_per_rank((48, 32), 1, W), b_ptr=_per_rank((48, 32), 2, W),
                             split=20),
        binds=(Bind("a_ptr", (48, 32), (0, 1)),)),
    "running_output_rows": lambda: _rows_case(U.running_output_rows, dict(BLOCK=32, STEPS=3)),
    "halo_rows": lambda: _rows_case(U.halo_rows, dict(BM=8, BLOCK=32), grid=(6,)),
    "short_rows_output": lambda: _rows_case(
        U.cumsum_rows, dict(BM=8, BLOCK=32), grid=(5,), extra=lambda W: dict(M=40),
        binds=(Bind("y_ptr", (48, 32), (0, 1), True),)),
    "scalar_norm_rows": lambda: _rows_case(U.scalar_norm_rows, dict(BLOCK=32)),
    "complex_rows": lambda: _rows_case(
        U.complex_rows, dict(BLOCK=16), extra=lambda W: dict(n_cols=16),
        binds=(Bind("x_ptr", (48, 32), (0, 1)), Bind("y_ptr", (48, 16), (0,), True)),
        out_shape=(48, 16)),
    **{f"mask_style{s}": (lambda s=s: _rows_case(U.mask_styles, dict(BM=16, BLOCK=64, STYLE=s),
                                                 grid=(3,)))
       for s in range(6)},
    "static_range_rows": lambda: _rows_case(U.static_range_rows, dict(BLOCK=16, PARTS=3), C=40,
                                            binds=(Bind("x_ptr", (48, 40), (0, 1)),
                                                   Bind("y_ptr", (48, 40), (0,), True))),
    "bitcast_read": lambda: _rows_case(U.bitcast_read, dict(BLOCK=32),
                                       binds=(Bind("x_ptr", (48, 32), (0, 1)),)),
    "bitcast_read_i16": lambda: _rows_case(U.bitcast_read_i16, dict(BLOCK=32), xtype="*bf16",
                                           binds=(Bind("x_ptr", (48, 32), (0, 1)),)),
    "histogram_local_atomics": lambda: _rows_case(
        U.histogram_local_atomics, dict(BM=16, BLOCK=32, BINS=8), grid=(3,),
        extra=lambda W: dict(hist_ptr=_zeros(8, np.int32)), extra_types=dict(hist_ptr="*i32"),
        binds=(Bind("x_ptr", (48, 32), (0, 1)),)),
    "embedding_bag": lambda: _embedding(U.embedding_bag),
    "embedding_bag_hinted": lambda: _embedding(U.embedding_bag_hinted),
    "pointer_bumped_rows": lambda: _rows_case(U.pointer_bumped_rows, dict(BLOCK=16), C=40,
                                              binds=(Bind("x_ptr", (48, 40), (0, 1)),
                                                     Bind("y_ptr", (48, 40), (0,), True))),
    "swapped_grid_cols": lambda: _rows_case(U.swapped_grid_cols, dict(BLOCK=16), grid=(2, 48)),
    "device_tma_rows": lambda: Case(
        U.device_tma_rows, dict(BM=16, BN=32), dict(x_ptr="*fp32", y_ptr="*fp32"),
        lambda W: dict(x_ptr=_per_rank((48, 32), 1, W), y_ptr=_zeros((48, 32)), M=48, N=32),
        (3,), (Bind("x_ptr", (48, 32), (0,)), Bind("y_ptr", (48, 32), (0,), True))),
}


# ------------------------------------------------------------------------- expectations

#: case -> {bound parameter: expected outcome}: CLEAN (emulated equal to the unfused kernel
#: under every policy, no race), ``(error type, regex of its message)``, or ``(LIMIT, why)``.
#: An all-to-all of a tensor every rank reads whole is always refused ("ends the schedule
#: holding"), so it is left to tests/test_emulate_matrix.py.
EXPECT = {
    "gemm_bias_gelu_2d": dict(a_ptr=CLEAN, b_ptr=CLEAN, bias_ptr=CLEAN, c_ptr=CLEAN),
    "batched_gemm_3d": dict(a_ptr=CLEAN, c_ptr=CLEAN),
    # the workspace's float atomic adds land in the order the interleaving gives, and the
    # last program of a tile stores what it reads back: C differs from the unfused kernel by
    # rounding, which the emulator excuses only in the elements the atomics wrote (ws_ptr)
    "splitk_atomic_workspace": dict(
        a_ptr=(LIMIT, "float atomic order reaches C through a load; reported as a mismatch",
               AssertionError),
        c_ptr=CLEAN),
    "persistent_bp_gemm": dict(a_ptr=CLEAN, c_ptr=CLEAN),
    "stream_k_counter_gemm": dict(a_ptr=CLEAN, c_ptr=CLEAN),
    "gemm_bt_trans": dict(a_ptr=CLEAN, bt_ptr=CLEAN, c_ptr=CLEAN),
    "gemm_init_then_store": dict(a_ptr=CLEAN, c_ptr=(
        "CompileError", "may both store the same elements of 'c_ptr'")),
    "relu_sparse_store": dict(a_ptr=CLEAN, c_ptr=(
        "CompileError", "is masked by a condition the compiler does not read as `index < bound` "
                        r"\(the arith.cmpf")),
    "layernorm_rowloop": dict(x_ptr=CLEAN, w_ptr=CLEAN, y_ptr=CLEAN),
    "softmax_online": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "softmax_three_pass": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "row_argmax_topk": dict(x_ptr=CLEAN, top_ptr=CLEAN),
    "cumsum_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    # the strides of x.T: the analysis takes stride arguments in parameter order (stride_x0
    # for dim 0), so the launch with stride_x0 = 1 is refused, as the runtime refuses it
    "transposed_read": dict(x_ptr=(
        "LaunchRequirementError", r"stride_x0=1 \(the kernel was compiled for stride_x0 == 48"),
        y_ptr=CLEAN),
    "transposed_tile": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "dequant_rows_int8": dict(x_ptr=CLEAN, s_ptr=CLEAN, y_ptr=CLEAN),
    "dequant_rows_fp8": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "where_pointer": dict(
        a_ptr=("CompileError", "cannot follow pointer arithmetic through 'arith.select'.*"
                               r"hint_region2\(a_ptr"),
        b_ptr=("CompileError", "cannot follow pointer arithmetic through 'arith.select'"),
        y_ptr=(LIMIT, "a tl.where between pointers into two buffers", EmulationError)),
    "where_pointer_hinted": dict(a_ptr=(LIMIT, "a tl.where between pointers into two buffers",
                                        EmulationError)),
    "hinted_int64_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "ragged_rows": dict(
        x_ptr=("CompileError", "its mask bounds the index along it only by `%n`, not a kernel "
                               "argument"),
        y_ptr=("CompileError", "its mask bounds the index along it only by `%n`")),
    "ragged_rows_bounded": dict(x_ptr=CLEAN, y_ptr=(
        "CompileError", "is masked along dim 1 by `index < %n`, a bound that is not the dim's "
                        "end")),
    "early_return_in_loop": dict(
        x_ptr=("CompileError", "Cannot have `return` statements inside `while` or `for`"),
        y_ptr=("CompileError", "Cannot have `return` statements inside `while` or `for`")),
    "early_return_tree": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    **{f"mask_style{s}": dict(x_ptr=CLEAN, y_ptr=CLEAN) for s in (0, 1, 2, 3, 5)},
    "mask_style4": dict(
        x_ptr=("CompileError", r"reads indices \[0, 64\), past the end of the dim; its mask does "
                               r"not bound the index along it.*\(the arith.cmpi ne at "),
        y_ptr=("CompileError", r"writes indices \[0, 64\), past the end of the dim; its mask")),
    "static_range_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "bitcast_read": dict(x_ptr=CLEAN),
    "bitcast_read_i16": dict(x_ptr=CLEAN),
    "bitcast_read_hinted": dict(x_ptr=CLEAN),
    "histogram_local_atomics": dict(x_ptr=CLEAN),
    "embedding_bag": dict(w_ptr=CLEAN, out_ptr=CLEAN),
    "embedding_bag_hinted": dict(w_ptr=CLEAN, out_ptr=CLEAN),
    "pointer_bumped_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "swapped_grid_cols": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "device_tma_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "running_output_rows": dict(x_ptr=CLEAN, y_ptr=(
        "CompileError", "stores the same box of 'y_ptr' .* in every iteration of the loop at")),
    "halo_rows": dict(x_ptr=CLEAN, y_ptr=(
        "CompileError", r"is masked along dim 0 by `index < 9 \+ 8\*%pid`, a bound that is not")),
    # the mask `rows < M` of a produced store is a launch-time equality: M = 40 would leave
    # rows 40..47 unstored but counted (before: a deadlock, the grid never stores them)
    "short_rows_output": dict(y_ptr=(
        "LaunchRequirementError", r"M=40 \(the kernel was compiled for M == 48")),
    "scalar_norm_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
    "complex_rows": dict(x_ptr=CLEAN, y_ptr=CLEAN),
}

def test_every_case_and_binding_has_an_expectation():
    check_expectations_cover(CASES, EXPECT)


@pytest.mark.parametrize("name,param,i,backend", items(CASES, EXPECT))
def test_probe_kernel(name, param, i, backend):
    probe(CASES[name](), param, i, backend, EXPECT[name][param], "unseen2.py")


def test_splitk_float_atomic_order_is_the_only_difference():
    """What the xfail of ``splitk_atomic_workspace`` with A gathered stands for: under an
    interleaving other than the unfused kernel's program order, the workspace's float atomic
    adds round in another order (notes on ``ws_ptr``, within their bound), and the last program
    of each tile stores what it reads back into C -- the only mismatches, on ``c_ptr``, by a
    few ulps. No race: the fused kernel is right; the emulator's comparison does not follow the
    atomics' rounding through a load."""
    case = CASES["splitk_atomic_workspace"]()
    bind = case.binds[0]
    res = run(case, bind, all_gather(bind.shape, "fp32", 2, dim=1, mode="pull", split=2), "sm",
              ("in-order", "reverse"))
    assert not res.races, res.summary()
    assert res.mismatches and all(", c_ptr: " in m and "[reverse]" in m
                                  for m in res.mismatches), res.summary()
    assert any("float atomic order" in n and "ws_ptr" in n for n in res.notes), res.summary()
    for r in range(2):
        got = res.outputs["reverse"][r]["c_ptr"]
        ref = res.outputs["in-order"][r]["c_ptr"]
        assert np.allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_where_between_two_tensors_names_them_and_what_to_do():
    """The emulator's one-buffer pointer tensors cannot run ``where_pointer`` (compiled fine
    with its output reduce-scattered): the error names both tensors and how to emulate such a
    kernel. Before: "select between pointers into different buffers"."""
    case = CASES["where_pointer"]()
    bind = case.binds[2]
    with pytest.raises(EmulationError, match=r"a tl.where between pointers into two tensors "
                                             r"\(a_ptr and b_ptr\).*select the loaded values "
                                             r"instead") as e:
        run(case, bind, reduce_scatter(bind.shape, "fp32", 2), "sm", ("in-order",))
    assert "unseen2.py:" in str(e.value)


def test_all_to_all_of_a_tensor_read_whole_says_how_to_read_a_part():
    """Every kernel of the corpus reads its all-to-all'ed tensor whole, which no rank holds at
    the end: refused, and the advice names what exists (view='rank'); it said "bind operand=
    to the part each rank holds", which no option does."""
    case = CASES["cumsum_rows"]()
    bind = case.binds[0]
    with pytest.raises(SyncopateError, match=r"rank 0 ends the schedule holding 768 of its 1536 "
                                             r"elements.*give the tensor view='rank'") as e:
        run(case, bind, all_to_all(bind.shape, "fp32", 2, split_dim=0, concat_dim=1), "sm",
            ("in-order",))
    assert "unseen2.py:" in str(e.value)


def test_emulator_refuses_a_grid_the_runtime_refuses():
    """A grid of 2 along axis 1, which ``cumsum_rows`` never reads: the runtime refuses it
    (every tile would run and signal twice); the emulator now does too, instead of emulating
    the launch."""
    case = dataclasses.replace(CASES["cumsum_rows"](), grid=(6, 2))
    bind = case.binds[1]
    with pytest.raises(SyncopateError, match=r"never reads tl.program_id\(1\)") as e:
        run(case, bind, reduce_scatter(bind.shape, "fp32", 2), "sm", ("in-order",))
    assert type(e.value).__name__ == "LaunchRequirementError"
