"""GEMM + all-reduce (``syncopate.ops.gemm_ar``'s fused kernel) in the CPU emulator: the local
GEMMs fused with the ``all_reduce`` template (reduce-scatter, then all-gather of the reduced
pieces on the same tensor), W = 2 and 4, both kernels, both orders, split 1 and 2, ragged
shapes (M not a multiple of W or of the tile, one row of decode), both lowerings.

Each run: race checker clean under several interleavings and two launches (the second with
fresh inputs), every rank's C within rounding of the numpy sum of the per-rank partial GEMMs
of that launch, and every rank's C **bitwise equal** to every other rank's -- and, since the
sum order is fixed (each piece summed once, by its owner, in chunk order), bitwise the same
under every interleaving. The all-gather half waits for the reduce-scatter chunks that complete
its piece (``after``): a mutation that drops those waits is caught.
"""

from __future__ import annotations

import numpy as np
import pytest

from syncopate.emulate import Emulation, PerRank, emulate
from syncopate.emulate.comm import Faults
from syncopate.emulate.modules import fuse_module
from syncopate.kernels import GemmConfig, compile_args, compile_attrs, kernel_fn
from syncopate.schedule import TEMPLATES

CFG = GemmConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
NUM_SMS = 4
POLICIES = ("in-order", "reverse", "late", "behind:0", "behind:-1", "random:1")
LAUNCHES = 2
SEED = 0
BF16_EPS = 2.0 ** -8


def _args(M, N, K, W, seed=1):
    """Per-rank A [M, K] and B [K, N] (K: this rank's shard), rounded to bf16 as staged."""
    rng = np.random.default_rng(seed)

    def bf(x):
        return (x.astype(np.float32).view(np.uint32) + 0x8000 & 0xFFFF0000).view(np.float32)
    a = PerRank([bf(rng.standard_normal((M, K))) for _ in range(W)])
    b = PerRank([bf(rng.standard_normal((K, N))) for _ in range(W)])
    return dict(a_ptr=a, b_ptr=b, c_ptr=np.zeros((M, N), np.float32), M=M, N=N, K=K,
                stride_am=K, stride_bk=N, stride_cm=N)


def _grid(kernel, M, N):
    if "tma" in kernel:
        return (NUM_SMS,)
    return (-(-M // CFG.BLOCK_M) * -(-N // CFG.BLOCK_N),)


def _emulation(kernel, M, N, K, W, order="swizzle", split=2, lowering="auto", backend="sm",
               mode="push", self_advance=False):
    sched = TEMPLATES["all_reduce"]([M, N], "bf16", W, split=split, order=order, mode=mode)
    sig, cx = compile_args(kernel, "bf16", CFG, num_sms=NUM_SMS)
    module, ttir = fuse_module(kernel_fn(kernel), signature=sig, constexprs=cx,
                               attrs=compile_attrs(kernel), schedule=sched, operand="c_ptr",
                               backend=backend, comm_programs=2, options=CFG.options(),
                               lowering=lowering, self_advance=self_advance)
    return Emulation(module, ttir, grid=_grid(kernel, M, N), args=_args(M, N, K, W))


def _check_results(em, res, M, N, W, launches=LAUNCHES):
    """Every rank, every policy: C of the last launch within rounding of the numpy sum of that
    launch's partial GEMMs; all ranks and all policies bitwise equal."""
    assert res.ok, res.summary()
    ins = [em.inputs(r, launches, SEED) for r in range(W)]
    parts = [ins[r]["a_ptr"].reshape(-1, em.args["K"][r]).astype(np.float64)
             @ ins[r]["b_ptr"].reshape(-1, N).astype(np.float64) for r in range(W)]
    exact = sum(parts)
    scale = sum(np.abs(p) for p in parts)
    first = None
    for policy, ranks in res.outputs.items():
        for r in range(W):
            got = ranks[r]["c_ptr"].reshape(M, N)
            assert np.isfinite(got).all(), f"rank {r} [{policy}]: C not complete"
            err = np.abs(got.astype(np.float64) - exact)
            # partials rounded to bf16 once each, the sum rounded after each added partial
            assert (err <= BF16_EPS * (W + 1) * (scale + 1e-3)).all(), \
                f"rank {r} [{policy}]: max error {err.max():.3g}"
            if first is None:
                first = got.copy()
            assert np.array_equal(got.view(np.uint32), first.view(np.uint32)), \
                f"rank {r} [{policy}] differs from rank 0 [{next(iter(res.outputs))}]"


@pytest.mark.parametrize("kernel", ["matmul_ptr_kernel", "matmul_tma_persistent_kernel"])
@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("split", [1, 2])
def test_gemm_ar_emulates_clean_and_identical_on_every_rank(kernel, W, split):
    M, N, K = 256, 128, 64
    em = _emulation(kernel, M, N, K, W, split=split)
    res = em.run(POLICIES, LAUNCHES, SEED)
    # every chunk moved in every launch under every policy, by each of the 2 comm programs
    assert sum(s["transfers"] for s in res.stats.values()) == \
        len(POLICIES) * LAUNCHES * em.schedule.num_chunks * 2
    _check_results(em, res, M, N, W)


@pytest.mark.parametrize("kernel,W,lowering", [("matmul_ptr_kernel", 2, "unrolled"),
                                               ("matmul_tma_persistent_kernel", 4, "table")])
def test_gemm_ar_self_advancing(kernel, W, lowering):
    """The runtime's default, ``self_advance="auto"``: the kernel advances its own epoch word
    (no host advance between the launches); clean, and identical on every rank."""
    M, N, K = 256, 128, 64
    em = _emulation(kernel, M, N, K, W, split=2, lowering=lowering, self_advance="auto")
    assert em.self_advance
    res = em.run(POLICIES, 3, SEED)
    _check_results(em, res, M, N, W, launches=3)


@pytest.mark.parametrize("kernel,W,order,M,N,K,lowering", [
    # rows not a multiple of W or of BLOCK_M, N not a multiple of BLOCK_N, K of BLOCK_K
    ("matmul_ptr_kernel", 4, "swizzle", 200, 96, 40, "unrolled"),
    ("matmul_tma_persistent_kernel", 4, "ring", 200, 96, 40, "table"),
    ("matmul_tma_persistent_kernel", 2, "ring", 136, 72, 48, "unrolled"),
    # decode: one row; only rank 0 owns rows, every other rank just receives them
    ("matmul_tma_persistent_kernel", 2, "swizzle", 1, 128, 64, "auto"),
    ("matmul_ptr_kernel", 4, "swizzle", 3, 64, 32, "table"),
])
def test_gemm_ar_ragged_shapes(kernel, W, order, M, N, K, lowering):
    em = _emulation(kernel, M, N, K, W, order=order, split=2, lowering=lowering)
    if lowering != "auto":
        assert em.lowering == lowering
    res = em.run(POLICIES[:4], LAUNCHES, SEED)
    _check_results(em, res, M, N, W)


def test_gemm_ar_pull_mode_emulates_clean():
    """``mode="pull"`` (the op's option; push is its default): the destination fetches the
    reduced pieces, the owner's drain waits until they were read. Clean and identical too."""
    M, N, K = 200, 96, 40
    em = _emulation("matmul_ptr_kernel", M, N, K, 4, mode="pull")
    res = em.run(POLICIES[:4], LAUNCHES, SEED)
    _check_results(em, res, M, N, 4)


@pytest.mark.parametrize("W,order", [(2, "swizzle"), (4, "ring")])
def test_gemm_ar_nvshmem_emulates_clean(W, order):
    """The nvshmem backend (puts from the same comm programs, 64-bit flags) runs the same
    plan: clean, within rounding, identical on every rank."""
    M, N, K = 200, 96, 40
    em = _emulation("matmul_tma_persistent_kernel", M, N, K, W, order=order, backend="nvshmem")
    assert em.backend == "nvshmem"
    res = em.run(POLICIES[:4], LAUNCHES, SEED)
    _check_results(em, res, M, N, W)


def test_dropping_the_all_gather_wait_on_the_reduce_scatter_is_caught():
    """The all-gather half must wait until the reduce-scatter chunks that complete its piece
    were added (``after``; ``CHUNK[c] >= epoch * comm programs`` on the owner). Without that
    wait the owner forwards a half-reduced piece. N = 256 makes the race reachable: a piece of
    128 x 256 is two sum tiles (16K elements each, one per comm program) but one copy tile
    (32K), so comm program 0 pushes the whole piece while program 1 may still be adding its
    half. The results then differ from the reduced reference on both ranks."""
    M, N = 256, 256
    sched = TEMPLATES["all_reduce"]([M, N], "bf16", 2, split=1, mode="push")
    assert all(c.after for c in sched.chunks if c.reduce == "none")  # the dependency exists
    sig, cx = compile_args("matmul_ptr_kernel", "bf16", CFG, num_sms=NUM_SMS)
    kw = dict(signature=sig, constexprs=cx, attrs=compile_attrs("matmul_ptr_kernel"),
              options=CFG.options(), schedule=sched, operand="c_ptr",
              grid=_grid("matmul_ptr_kernel", M, N), args=_args(M, N, 64, 2), backend="sm",
              comm_programs=2, policies=("in-order", "late"), launches=2, check=False)
    assert emulate(kernel_fn("matmul_ptr_kernel"), **kw).ok  # unmutated: clean
    res = emulate(kernel_fn("matmul_ptr_kernel"), faults=Faults(skip_after_wait=True), **kw)
    assert not res.ok
    bad = {(m.split(",")[0], m.rsplit("[", 1)[1]) for m in res.mismatches}
    assert bad == {(f"rank {r}", f"{p}]") for r in (0, 1) for p in ("in-order", "late")}
