"""Float atomic order in a fused emulation (issue 28, item 5).

A split-K GEMM adds its fp32 partial tiles into C with ``tl.atomic_add``; fused with an
all-gather of A, the emulated programs run in another order than the unfused kernel's under
``reverse`` and ``random`` policies, so elements of C round differently.  That is not an error:
the emulation is clean, with notes that say "float atomic order" (the elements are within
``reference.float_atomic_bound``).  A wrong value added -- one tile's partial off by 2^-6,
invisible at a glance and over a thousand times the rounding bound -- is still a mismatch, and so
is an element that took another number of adds.
"""

from __future__ import annotations

import functools

import numpy as np
import triton
import triton.language as tl

from syncopate.emulate import PerRank, emulate_module, fuse_module
from syncopate.schedule import all_gather

M, K, N = 64, 64, 32
CX = dict(BM=16, BN=16, BK=16, SPLIT_K=2)
GRID = ((M // 16) * (N // 16), 2)
POLICIES = ("in-order", "reverse", "random:1", "random:2")
SIG = {n: "*fp32" for n in ("a_ptr", "b_ptr", "c_ptr")}
SIG.update({n: "i32" for n in ("M", "N", "K", "stride_am", "stride_bk", "stride_cm")})


@triton.jit
def splitk_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT_K: tl.constexpr,
                MUTATION: tl.constexpr):
    """``C += A @ B`` on a grid (tiles, SPLIT_K): each program adds its K range's partial
    tile into C atomically.  ``MUTATION`` 1: one (tile, split) adds a wrong value; 2: one
    (tile, split) adds twice."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    n_tiles_n = tl.cdiv(N, BN)
    rm = (pid // n_tiles_n) * BM + tl.arange(0, BM)
    rn = (pid % n_tiles_n) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_steps = tl.cdiv(K, BK * SPLIT_K)
    for s in range(k_steps):
        rk = (pid_k * k_steps + s) * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :], mask=rk[None, :] < K,
                    other=0.0)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :], mask=rk[:, None] < K,
                    other=0.0)
        acc = tl.dot(a, b, acc)
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :]
    hit = (pid == 5) & (pid_k == 1)
    if MUTATION == 1:
        acc = tl.where(hit, acc + 1.0 / 64.0, acc)
    if MUTATION == 2:
        tl.atomic_add(c, acc, mask=hit & (rm[:, None] >= 0))
    tl.atomic_add(c, acc)


@functools.cache
def _fused(mutation: int):
    # a mutation keyed on the program id (``pid == 5``) reaches the data: remapped, program 5
    # would mutate another tile, which tile-remap's launch check refuses; the mutated kernels
    # keep their tile order, so the mutation hits the tile it hits unfused
    cx = dict(CX, MUTATION=mutation)
    return fuse_module(splitk_gemm, signature={**SIG, **{k: "constexpr" for k in cx}},
                       constexprs=cx, schedule=all_gather([M, K], "fp32", 2, split=2),
                       operand="a_ptr", backend="sm", comm_programs=2, remap=mutation == 0)


def _args():
    rng = np.random.default_rng(2805)
    return dict(a_ptr=PerRank([rng.standard_normal((M, K)).astype(np.float32)
                               for _ in range(2)]),
                b_ptr=rng.standard_normal((K, N)).astype(np.float32),
                c_ptr=rng.standard_normal((M, N)).astype(np.float32),
                M=M, N=N, K=K, stride_am=K, stride_bk=N, stride_cm=N)


def _emulate(mutation: int):
    """The fused module of ``mutation`` against the unfused *correct* kernel."""
    module, _ = _fused(mutation)
    _, local = _fused(0)
    return emulate_module(module, local, grid=GRID, args=_args(), policies=POLICIES,
                          launches=2)


def test_splitk_atomic_add_order_is_a_note_not_a_mismatch():
    res = _emulate(0)
    assert res.ok, res.summary()
    noted = {n.rsplit("[", 1)[1].rstrip("]") for n in res.notes}
    assert all(n.startswith("float atomic order: ") for n in res.notes), res.notes
    # programs in the unfused order add in the same order: bitwise; the others round apart
    assert "in-order" not in noted and {"reverse", "random:1", "random:2"} <= noted, res.notes
    assert "note(s)" in res.summary().splitlines()[0]


def test_splitk_wrong_value_added_is_a_mismatch():
    res = _emulate(1)
    assert not res.ok
    # every policy, both ranks, both launches: the mutated tile (16 x 16) and nothing else
    assert len(res.mismatches) == len(POLICIES) * 2 * 2, res.summary()
    assert all(": 256 element(s) differ from the unfused kernel" in m for m in res.mismatches), \
        res.summary()


def test_splitk_extra_add_is_a_mismatch_naming_the_count():
    res = _emulate(2)
    assert not res.ok
    assert len(res.mismatches) == len(POLICIES) * 2 * 2, res.summary()
    assert all("256 of them took another number of float atomic adds" in m
               for m in res.mismatches), res.summary()
