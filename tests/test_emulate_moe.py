"""MoE dispatch fused with the grouped GEMM, in the CPU emulator (issue 12, section 2).

Why these tests: the fused ``moe_dispatch_gemm`` kernel runs on GPUs only, but everything it
is made of -- the grouped GEMM, the ``moe_dispatch`` schedule with run-time extents, the
kernel arguments per rank (``ops.moe_dispatch_gemm.kernel_args``), the device-side packing
(``ops.moe_routing.pack_dispatch``) -- is built here as the op builds it and emulated under
several interleavings with the race checker on (``check=True``: also compared with the unfused
kernel). The emulator copies only each chunk's counted rows, so padding never arrives and a
tile that read it would be reported. Each rank's output is then compared with a torch
reference computed independently of the packing: every source's tokens routed to each expert,
first ``C`` in token order, times the expert's weight.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from moe_helpers import merge_rank_args  # noqa: E402
from moe_helpers import routing as _routing  # noqa: E402

from syncopate.emulate import PerRank, emulate  # noqa: E402
from syncopate.errors import LaunchError, ScheduleError  # noqa: E402
from syncopate.kernels.grouped_gemm import grouped_gemm_kernel  # noqa: E402
from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig, compile_args  # noqa: E402
from syncopate.ops.moe_dispatch_gemm import OPERANDS, kernel_args  # noqa: E402
from syncopate.ops.moe_routing import pack_dispatch  # noqa: E402
from syncopate.schedule.moe import moe_dispatch  # noqa: E402

CFG = GroupedGemmConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)
POLICIES = ("in-order", "reverse", "late", "random:3")
RTOL = 2e-2


def _reference(xs, ids, w_full, W, E, C):
    """``ref[d][(s, e)]``: source ``s``'s tokens for rank ``d``'s local expert ``e`` (the first
    ``C`` in token order) times the expert's weight, fp32 -- from the routing alone."""
    El = E // W
    ref = [dict() for _ in range(W)]
    for d in range(W):
        for s in range(W):
            for e in range(El):
                x = d * El + e
                toks = [t for t in range(ids[s].shape[0]) for j in range(ids[s].shape[1])
                        if ids[s][t, j] == x][:C]
                rows = xs[s][toks].float() if toks else torch.zeros(0, xs[s].shape[1])
                ref[d][(s, e)] = rows @ w_full[x].float()
    return ref


def _run(W, E, C, H, N, T, k, routing, seed=0, policies=POLICIES, mode="pull", launches=1,
         lowering="auto", trace=False, self_advance=False):
    g = torch.Generator().manual_seed(seed)
    El = E // W
    xs = [torch.randn(T, H, generator=g).to(torch.bfloat16) for _ in range(W)]
    ids = _routing(routing, W, T, k, E, g)
    w_full = (torch.randn(E, H, N, generator=g) / H ** 0.5).to(torch.bfloat16)
    packed = [pack_dispatch(xs[s], ids[s], E, W, C) for s in range(W)]
    X = torch.cat([p.send.reshape(E * C, H) for p in packed])
    CNT = torch.cat([p.counts.reshape(-1) for p in packed]).contiguous()
    outs = [torch.full((W * El * C, N), float("nan"), dtype=torch.bfloat16) for _ in range(W)]
    per_rank = [kernel_args(X, CNT, w_full[d * El:(d + 1) * El].contiguous(), outs[d], d, W, E,
                            C, CFG) for d in range(W)]
    grid = per_rank[0][1]
    args = merge_rank_args(per_rank)
    sig, cx = compile_args("bf16", CFG)
    res = emulate(grouped_gemm_kernel, signature=sig, constexprs=cx,
                  schedule=moe_dispatch(W, E, C, H, mode=mode), operand=OPERANDS, grid=grid,
                  args=args, backend="sm", comm_programs=2, options=CFG.options(), launches=launches,
                  policies=policies, check=True, lowering=lowering, trace=trace,
                  self_advance=self_advance)
    return res, _reference(xs, ids, w_full, W, E, C), packed


def _check(res, ref, packed, W, E, C, N, policies=POLICIES):
    El = E // W
    for policy in policies:
        for d in range(W):
            out = np.asarray(res.outputs[policy][d]["c_ptr"], dtype=np.float64)
            out = out.reshape(W * El * C, N)
            for (s, e), r in ref[d].items():
                n = r.shape[0]
                gi = s * El + e
                assert int(packed[s].counts[d, d * El + e]) == n
                got = torch.from_numpy(out[gi * C:gi * C + n])
                if n:
                    err = float((got - r.double()).abs().max() / (1 + r.abs().max()))
                    assert err <= RTOL, f"{policy} rank {d} source {s} expert {e}: err {err}"
                assert np.isnan(out[gi * C + n:(gi + 1) * C]).all(), \
                    f"{policy} rank {d} group {gi}: rows past the count were written"


@pytest.mark.parametrize("routing", ["random", "hot", "empty"])
def test_dispatch_gemm_w2(routing):
    W, E, C, H, N, k = 2, 4, 32, 32, 32, 2
    T = 40 if routing == "hot" else 24
    res, ref, packed = _run(W, E, C, H, N, T, k, routing)
    _check(res, ref, packed, W, E, C, N)
    if routing == "hot":  # every token's first choice is expert 0: 40 for 32 rows, 8 dropped
        assert all(int(p.dropped[0]) == T - C for p in packed)
    if routing == "empty":
        assert all(int(p.counts[:, 1::2].sum()) == 0 for p in packed)


def test_second_launch_reuses_the_buffers_race_free():
    """Launch 2 stages fresh random tokens and counts (counts of any int32 value: the copier
    and the kernel clamp them to the capacity) into the buffers peers read in launch 1: no
    race, and the fused outputs equal the unfused kernel's (``check=True``)."""
    _run(2, 4, 32, 32, 32, 24, 2, "random", seed=5, launches=2, policies=("in-order", "late"))


@pytest.mark.parametrize("lowering", ["unrolled", "table"])
def test_both_lowerings(lowering):
    """Per-chunk code and the chunk table (records read at run time) copy the same counted
    prefixes: the emulator reads the count for the chunk the record names."""
    W, E, C, H, N, T, k = 2, 4, 32, 32, 32, 24, 2
    res, ref, packed = _run(W, E, C, H, N, T, k, "empty", seed=7, policies=("random:4",),
                            lowering=lowering)
    _check(res, ref, packed, W, E, C, N, ("random:4",))


@pytest.mark.parametrize("lowering", ["unrolled", "table"])
def test_traced_dispatch_w2(lowering):
    """The kernel ``SYNCOPATE_TRACE=1`` launches (``scripts/gpu_trace.py``: W = 2, E = 8,
    top-2 random routing): the lowering and ``insert-trace`` run too, and the pass's
    transparency check passes -- the events (around the count branch's wait, the copy loops'
    signals, the table's wait loops) change nothing else -- so the module emulated here, clean
    under every policy and equal to the routing's reference, is what the traced launch does."""
    W, E, C, H, N, T, k = 2, 8, 32, 32, 32, 24, 2
    pol = ("in-order", "late", "behind:0", "random:2")
    res, ref, packed = _run(W, E, C, H, N, T, k, "random", seed=11, policies=pol,
                            lowering=lowering, trace=True)
    _check(res, ref, packed, W, E, C, N, pol)


def test_dispatch_gemm_w2_push():
    """Pushed chunks (the source copies; it reads its own counts) give the same result."""
    W, E, C, H, N, T, k = 2, 4, 32, 32, 32, 24, 2
    res, ref, packed = _run(W, E, C, H, N, T, k, "random", seed=3, mode="push",
                            policies=("in-order", "random:1"))
    _check(res, ref, packed, W, E, C, N, ("in-order", "random:1"))


@pytest.mark.parametrize("routing", ["random", "hot", "empty"])
def test_dispatch_gemm_w4(routing):
    W, E, C, H, N, k = 4, 8, 16, 32, 32, 2
    T = 24 if routing == "hot" else 16  # hot: 24 first choices for 16 rows on expert 0
    res, ref, packed = _run(W, E, C, H, N, T, k, routing, seed=1,
                            policies=("in-order", "random:2"))
    _check(res, ref, packed, W, E, C, N, ("in-order", "random:2"))
    if routing == "hot":
        assert all(int(p.dropped[0]) == T - C for p in packed)


def test_only_counted_rows_move():
    """The emulator copies the counted prefix of each data chunk: with everything routed to
    the even experts, the bytes moved are the tokens that cross ranks, not the capacity."""
    W, E, C, H, N, T, k = 2, 4, 32, 32, 32, 24, 2
    res, ref, packed = _run(W, E, C, H, N, T, k, "empty", policies=("in-order",))
    crossing = sum(int(packed[s].counts[d].sum()) for s in range(W) for d in range(W) if s != d)
    counts_moved = W * (W - 1) * W * E
    launch1 = res.stats["in-order"]["copied_elements"]
    assert launch1 == crossing * H + counts_moved
    assert launch1 < W * (W - 1) * E * C * H / 4  # far below copying every capacity region


def test_a_kernel_reading_padding_is_caught():
    """A consumer that reads rows no count covers -- here the grouped GEMM with its ``a_base``
    off by one rank, so it reads the groups of another rank's experts, whose valid extent on
    this rank is 0 -- is reported: those rows never arrive (read-before-arrival), although
    the schedule's static model says every rank holds all of X."""
    W, E, C, H, N, T, k = 2, 4, 16, 32, 32, 12, 2
    El = E // W
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(T, H, generator=g).to(torch.bfloat16) for _ in range(W)]
    ids = _routing("random", W, T, k, E, g)
    packed = [pack_dispatch(xs[s], ids[s], E, W, C) for s in range(W)]
    X = torch.cat([p.send.reshape(E * C, H) for p in packed])
    CNT = torch.cat([p.counts.reshape(-1) for p in packed]).contiguous()
    w = torch.zeros(El, H, N, dtype=torch.bfloat16)
    per_rank = [kernel_args(X, CNT, w, torch.zeros(W * El * C, N, dtype=torch.bfloat16), d, W,
                            E, C, CFG) for d in range(W)]
    args = dict(per_rank[0][0])
    args["c_ptr"] = PerRank([pr[0]["c_ptr"] for pr in per_rank])
    args["cnt_base"] = PerRank([pr[0]["cnt_base"] for pr in per_rank])
    args["a_base"] = PerRank([((d + 1) % W) * El for d in range(W)])  # the bug
    sig, cx = compile_args("bf16", CFG)
    res = emulate(grouped_gemm_kernel, signature=sig, constexprs=cx,
                  schedule=moe_dispatch(W, E, C, H), operand=OPERANDS, grid=per_rank[0][1],
                  args=args, backend="sm", comm_programs=2, options=CFG.options(), launches=1,
                  policies=("in-order",), check=False)
    assert any(r.kind == "read-before-arrival" and "comm program" not in r.program
               for r in res.races), res.races


def test_bad_sizes_are_typed_errors():
    with pytest.raises(ScheduleError, match="do not divide"):
        moe_dispatch(3, 4, 16, 32)
    X = torch.zeros(2 * 4 * 24, 32, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="multiple of the grouped GEMM's BLOCK_M"):
        kernel_args(X, torch.zeros(32, dtype=torch.int32), torch.zeros(2, 32, 32), X, 0, 2, 4,
                    24, CFG)


@pytest.mark.parametrize("lowering", ["unrolled", "table"])
def test_fused_kernel_compiles_for_sm90(lowering):
    """The whole pipeline, lowering included (what the op's FusedKernel runs on a GPU): the
    grouped GEMM fused with the dispatch schedule at the op's default tiles compiles to an
    sm_90 cubin with wgmma and system-scope acquire loads (the waits)."""
    import syncopate
    from syncopate.kernels.grouped_gemm_launch import compile_attrs
    cfg = GroupedGemmConfig()
    sig, cx = compile_args("bf16", cfg)
    fc = syncopate.compile(grouped_gemm_kernel, signature=sig, constexprs=cx,
                           schedule=moe_dispatch(2, 8, 256, 1024), operand=OPERANDS,
                           backend="sm", comm_programs=2, attrs=compile_attrs(),
                           lowering=lowering, **cfg.options())
    ptx = fc.asm["ptx"]
    assert fc.asm["cubin"], "no cubin"
    assert "wgmma.mma_async" in ptx
    assert "ld.acquire.sys.global" in ptx


def test_dispatch_with_a_self_advancing_epoch():
    """``self_advance=True`` (passes/self_advance_epoch.py): three launches of the MoE dispatch
    with no host advance, race-free and equal to the unfused kernel (``check=True``), the epoch
    word, counter and mirror at 3, 0, 3 afterwards."""
    res, _, _ = _run(2, 4, 32, 32, 32, 24, 2, "random", seed=3, launches=3, self_advance=True,
                     policies=("in-order", "late", "random:2"))
    assert res.ok
