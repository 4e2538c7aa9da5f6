"""The kernels of issue 8's silent-miscompile classes, *executed*: fused, emulated for 2 ranks
over 2 launches under several interleavings, and compared with the unfused kernel on the
gathered tensor (bit for bit; a K-tile remap changes the fp32 summation order, so that one
case is compared by the emulator's reduced-region rule instead).

Each class also has a regression test that re-creates the old compiler's behaviour (the remap
the soundness policy now refuses) and checks that the emulator reports the wrong output: the
tests would fail if the checker stopped catching what the compiler once did.
"""

from __future__ import annotations

import numpy as np
import pytest

from syncopate.emulate import PerRank, emulate
from syncopate.schedule import all_gather
from syncopate.tiling import Op, RemapSlice, Step

from corpus import kernels as CK
from corpus import unseen as U

POLICIES = ("in-order", "late", "behind:0", "behind:1", "random:3")
BACKENDS = [("sm", "pull"), ("sm", "push"), ("ce", "pull")]
PTRS = {n: "*bf16" for n in ("a_ptr", "b_ptr", "c_ptr", "x_ptr", "y_ptr", "inp_ptr", "out_ptr")}
PTRS["idx_ptr"] = "*i32"


def _sig(fn, cx, types=None):
    types = {**PTRS, **(types or {})}
    return {n: ("constexpr" if n in cx else types.get(n, "i32")) for n in fn.arg_names}


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _gemm_case(kind):
    M, K, N = 128, 64, 64
    a = PerRank([_rand((M, K), 1), _rand((M, K), 2)])
    b = _rand((K, N), 3)
    c = np.zeros((M, N), np.float32)
    if kind == "bp":
        return (U.bp_gemm_derived, dict(BM=32, BN=32, BK=32), [M, K], "a_ptr",
                dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=K, stride_ak=1,
                     stride_bk=N, stride_bn=1, stride_cm=N, stride_cn=1), (16,))
    return (U.persistent_rowmajor_gemm, dict(BM=32, BN=32, BK=32, NUM_PROGS=4), [M, K], "a_ptr",
            dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=K, stride_bk=N,
                 stride_cm=N), (4,))


def _xt_case():
    K, M, N = 128, 64, 64
    x = PerRank([_rand((K, M), 1), _rand((K, M), 2)])
    return (U.xt_gemm_2d, dict(BM=32, BN=32, BK=32), [K, M], "x_ptr",
            dict(x_ptr=x, y_ptr=_rand((K, N), 3), c_ptr=np.zeros((M, N), np.float32), M=M, N=N,
                 K=K, stride_xk=M, stride_xm=1, stride_yk=N, stride_yn=1, stride_cm=N,
                 stride_cn=1), (2, 2))


def _gather_case(fn):
    R, C = 64, 32
    idx = np.random.default_rng(7).permutation(R).astype(np.int32)
    inp = PerRank([_rand((R, C), 1), _rand((R, C), 2)])
    return (fn, dict(BLOCK=32), [R, C], "inp_ptr",
            dict(inp_ptr=inp, idx_ptr=idx, out_ptr=np.zeros((R, C), np.float32), n_cols=C,
                 stride_in=C, stride_out=C), (R,))


def _tutorial_case():
    """Triton's tutorial GEMM as written there (``corpus/kernels.py``): loop-carried A and B
    pointers, ``% M`` wrapped rows, the K mask ``offs_k < K - k * BLOCK_K`` written from the
    induction variable; fp16 out."""
    M, K, N = 128, 64, 64
    a = PerRank([_rand((M, K), 1), _rand((M, K), 2)])
    return (CK.matmul_ptr, dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2), [M, K], "a_ptr",
            dict(a_ptr=a, b_ptr=_rand((K, N), 3), c_ptr=np.zeros((M, N), np.float32), M=M, N=N,
                 K=K, stride_am=K, stride_ak=1, stride_bk=N, stride_bn=1, stride_cm=N,
                 stride_cn=1), (8,), {"c_ptr": "*fp16"})


def _rows_of(fn, cx, grid, out_shape=None):
    """A row-wise kernel over a [64, 32] input, given the arguments of those below it takes
    (``M``, ``n_cols``, ``stride``, ``inp_ptr``, ``out_ptr``)."""
    R, C = 64, 32
    args = dict(inp_ptr=PerRank([_rand((R, C), 1), _rand((R, C), 2)]),
                out_ptr=np.zeros(out_shape or (R, C), np.float32), M=R, n_cols=C, stride=C)
    args = {k: v for k, v in args.items() if k in fn.arg_names}
    return fn, cx, [R, C], "inp_ptr", args, grid


CASES = {
    "tutorial_matmul": _tutorial_case,
    "early_exit_rows": lambda: _rows_of(U.early_exit_rows, dict(BM=16, BLOCK=32), (6,)),
    "stencil_rows": lambda: _rows_of(U.stencil_rows, dict(BM=16, BLOCK=32), (4,)),
    "column_sums": lambda: _rows_of(U.column_sums, dict(BM=16, BLOCK=16), (2,), (32,)),
    "while_rows": lambda: _rows_of(U.while_rows, dict(BM=8, BLOCK=32), (3,)),
    "int64_rows": lambda: _rows_of(U.int64_rows, dict(BLOCK=32), (64,)),
    "bp_gemm_derived": lambda: _gemm_case("bp"),
    "persistent_rowmajor_gemm": lambda: _gemm_case("persistent"),
    "xt_gemm_2d": _xt_case,
    "row_gather": lambda: _gather_case(U.row_gather),
    "row_gather_hinted": lambda: _gather_case(U.row_gather_hinted),
    "masked_rows": lambda: _rows_of(U.masked_rows, dict(BLOCK=32), (64,)),
}


def _emulate(name, backend, mode, policies=POLICIES):
    fn, cx, shape, operand, args, grid, *types = CASES[name]()
    return emulate(fn, signature=_sig(fn, cx, *types), constexprs=cx,
                   schedule=all_gather(shape, "bf16", 2, mode=mode, split=2), operand=operand,
                   grid=grid, args=args, backend=backend, comm_programs=2, policies=policies,
                   launches=2, check=False)


@pytest.mark.parametrize("backend,mode", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_unseen_kernel_emulates_clean(name, backend, mode):
    res = _emulate(name, backend, mode)
    assert res.ok, res.summary()
    assert all(not s["deadlocked"] for s in res.stats.values())


@pytest.mark.parametrize("name", ["bp_gemm_derived", "row_gather"])
def test_emulator_catches_the_old_remap(name, monkeypatch):
    """The compiler before the soundness policy remapped these coordinates (class 1: ``i`` of
    ``j = pid - i * n``; class 3: a loaded row index). Re-create that and the emulator must see
    rank 1's output go wrong."""
    from syncopate_mlir.passes import tile_remap

    monkeypatch.setattr(tile_remap, "remap_refusal", lambda func, values: None)
    # nor the launch check that the remap renumbers the launch's tiles (which refuses
    # bp_gemm_derived's launches, and cannot be built for row_gather's loaded rows)
    monkeypatch.setattr(tile_remap, "launch_check", lambda *a: RemapSlice(
        "", 0, "", 1, (0,), (Step(Op.CONST),), 0, ()))
    res = _emulate(name, "sm", "pull", policies=("in-order",))
    assert not res.ok
    assert any(m.startswith("rank 1") for m in res.mismatches), res.summary()


def test_emulator_catches_the_comm_plan_on_every_row():
    """Class 2: on a 2-D grid, comm programs used to be selected by program_id(0) alone, so
    every row of axis 1 ran the whole comm plan. Re-create that (undo the leader guard) and the
    emulator must report it; the module as compiled is clean (test above)."""
    from syncopate.emulate import emulate_module, fuse_module
    from syncopate.emulate import mutations as mu

    fn, cx, shape, operand, args, grid = CASES["xt_gemm_2d"]()
    module, local = fuse_module(fn, signature=_sig(fn, cx), constexprs=cx,
                                schedule=all_gather(shape, "bf16", 2, mode="push", split=2),
                                operand=operand, backend="sm", comm_programs=2)
    res = emulate_module(mu.comm_on_every_row(module), local, grid=grid, args=args,
                         policies=("in-order", "late", "behind:1"), launches=3)
    # the surplus signals of launch 1 satisfy launch 2's waits before its rows arrive
    assert any(r.kind == "read-before-arrival" and "compute" in r.program and r.epoch >= 2
               for r in res.races), res.summary()
