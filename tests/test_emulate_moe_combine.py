"""MoE second expert GEMM + combine, fused, in the CPU emulator (issue 12, section 2).

Why these tests: the fused ``moe_gemm_combine`` kernel runs on GPUs only, but what it is made
of -- the grouped GEMM producing ``Y``, the ``moe_combine`` schedule (a produced, per-rank
tensor whose chunks have run-time extents), the kernel's arguments per rank
(``ops.moe_gemm_combine.kernel_args``), the row map and the weighted sum the op runs after the
launch (``fused_rows``, ``combine_rows``) -- is built here as the op builds it and emulated
under several interleavings with the race checker on (``check=True``: any race, or a final
region that differs from the unfused kernel's output, raises). The emulator copies only each
chunk's counted rows and lets the rows past the count be released unstored (padding), so a
tile that signalled data it had not stored is still reported, and the rows that must not
arrive (padding) are checked not to. Each rank's expert outputs and its combined tokens are
compared with torch references computed from the routing alone (tests/moe_helpers.py).

The last tests compose the whole layer -- dispatch, activation, combine -- fused in the
emulator, and unfused through the public ops in loopback threads, against a torch reference
of the layer.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from moe_helpers import kept, layer_reference, merge_rank_args, routing, silu  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from syncopate.emulate import PerRank, emulate  # noqa: E402
from syncopate.errors import ScheduleError  # noqa: E402
from syncopate.kernels.grouped_gemm import grouped_gemm_kernel  # noqa: E402
from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig, compile_args  # noqa: E402
from syncopate.ops.moe_dispatch_gemm import OPERANDS as DISPATCH_OPERANDS  # noqa: E402
from syncopate.ops.moe_dispatch_gemm import kernel_args as dispatch_args  # noqa: E402
from syncopate.ops.moe_gemm_combine import (OPERANDS, combine_rows, fused_rows,  # noqa: E402
                                            kernel_args)
from syncopate.ops.moe_routing import pack_dispatch  # noqa: E402
from syncopate.schedule import analyze  # noqa: E402
from syncopate.schedule.moe import moe_combine, moe_dispatch, y_group  # noqa: E402

CFG = GroupedGemmConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)
POLICIES = ("in-order", "reverse", "late", "random:3")
RTOL = 2e-2


def _layer_inputs(kind, W, T, k, E, Hd, F, *, seed):
    """A whole MoE layer's inputs from one seed: routing ``ids``, tokens ``xs`` and routing
    weights ``wts`` per rank, the experts' ``w1`` ``[E, Hd, F]`` and ``w2`` ``[E, F, Hd]``."""
    g = torch.Generator().manual_seed(seed)
    ids = routing(kind, W, T, k, E, g)
    xs = [torch.randn(T, Hd, generator=g).to(torch.bfloat16) for _ in range(W)]
    wts = [torch.rand(T, k, generator=g) for _ in range(W)]
    w1 = (torch.randn(E, Hd, F, generator=g) / Hd ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, F, Hd, generator=g) / F ** 0.5).to(torch.bfloat16)
    return ids, xs, wts, w1, w2


def _emulate_combine(hs, CNT, w2, W, E, C, *, mode="push", policies=POLICIES, launches=1,
                     lowering="auto", kernel=grouped_gemm_kernel, check=True, cnt_base=None,
                     self_advance=False):
    """The fused combine kernel on ``W`` emulated ranks: rank ``d`` runs the grouped GEMM on
    ``hs[d]`` ``[W*El*C, F]`` with its experts' ``w2`` and produces its part of ``Y``."""
    El = E // W
    H = w2.shape[2]
    Ys = [torch.full((W * E * C, H), float("nan"), dtype=torch.bfloat16) for _ in range(W)]
    per_rank = [kernel_args(hs[d], CNT, w2[d * El:(d + 1) * El].contiguous(), Ys[d], d, W, E, C,
                            CFG) for d in range(W)]
    args = merge_rank_args(per_rank)
    if cnt_base is not None:
        args["cnt_base"] = PerRank(cnt_base)
    sig, cx = compile_args("bf16", CFG)
    return emulate(kernel, signature=sig, constexprs=cx,
                   schedule=moe_combine(W, E, C, H, mode=mode), operand=OPERANDS,
                   grid=per_rank[0][1], args=args, backend="sm", comm_programs=2,
                   options=CFG.options(), launches=launches, policies=policies, check=check,
                   lowering=lowering, self_advance=self_advance)


def _setup(W, E, C, F, H, T, k, kind, seed):
    g = torch.Generator().manual_seed(seed)
    El = E // W
    ids = routing(kind, W, T, k, E, g)
    xs = [torch.randn(T, 8, generator=g).to(torch.bfloat16) for _ in range(W)]
    packed = [pack_dispatch(xs[s], ids[s], E, W, C) for s in range(W)]
    CNT = torch.cat([p.counts.reshape(-1) for p in packed]).contiguous()
    hs = [torch.randn(W * El * C, F, generator=g).to(torch.bfloat16) for _ in range(W)]
    w2 = (torch.randn(E, F, H, generator=g) / F ** 0.5).to(torch.bfloat16)
    wts = [torch.rand(T, k, generator=g) for _ in range(W)]
    return ids, packed, CNT, hs, w2, wts


def _check_outputs(res, policy, ids, packed, hs, w2, wts, W, E, C):
    """Rank ``s``'s ``Y``: every expert's rows for ``s``'s tokens (own experts computed locally,
    the others arrived), rows past the counts never written; its combined tokens."""
    El = E // W
    H = w2.shape[2]
    for s in range(W):
        Y = np.asarray(res.outputs[policy][s]["c_ptr"], dtype=np.float32).reshape(W * E * C, H)
        expected = torch.zeros(ids[s].shape[0], H)
        for x in range(E):
            d, e = divmod(x, El)
            pairs = kept(ids[s], x, C)
            n = len(pairs)
            assert int(packed[s].counts[d, x]) == n
            row0 = y_group(E, W, d, s, x) * C
            src = (s * El + e) * C
            ref = hs[d][src:src + n].float() @ w2[x].float()
            got = torch.from_numpy(Y[row0:row0 + n])
            if n:
                err = float((got - ref).abs().max() / (1 + ref.abs().max()))
                assert err <= RTOL, f"{policy} rank {s} expert {x}: err {err}"
            assert np.isnan(Y[row0 + n:row0 + C]).all(), \
                f"{policy} rank {s} expert {x}: rows past the count arrived or were written"
            for (t, i), row in zip(pairs, ref):
                expected[t] += float(wts[s][t, i]) * row
        rows = fused_rows(packed[s].slot, s, W, E, C)
        out = combine_rows(torch.from_numpy(Y).to(torch.bfloat16), rows, wts[s], torch.float32)
        err = float((out - expected).abs().max() / (1 + expected.abs().max()))
        assert err <= RTOL, f"{policy} rank {s}: combined tokens off by {err}"
        assert torch.isfinite(out).all(), "a dropped choice or padding leaked into the sum"


@pytest.mark.parametrize("kind", ["random", "hot", "empty"])
def test_combine_w2(kind):
    """Uniform routing; one hot expert (expert 0 gets 40 first choices for 32 rows: 8 dropped,
    their slot -1 contributes nothing); empty experts (every odd one: its tiles compute nothing
    but signal, its chunks arrive empty)."""
    W, E, C, F, H, k = 2, 4, 32, 32, 32, 2
    T = 40 if kind == "hot" else 24
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, kind, seed=0)
    res = _emulate_combine(hs, CNT, w2, W, E, C)
    for policy in POLICIES:
        _check_outputs(res, policy, ids, packed, hs, w2, wts, W, E, C)
    if kind == "hot":
        assert all(int(p.dropped[0]) == T - C for p in packed)
        assert all((p.slot == -1).sum() == T - C for p in packed)
    if kind == "empty":
        assert all(int(p.counts[:, 1::2].sum()) == 0 for p in packed)


@pytest.mark.parametrize("kind", ["random", "hot", "empty"])
def test_combine_w4(kind):
    W, E, C, F, H, k = 4, 8, 16, 32, 32, 2
    T = 24 if kind == "hot" else 16
    pol = ("in-order", "random:2")
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, kind, seed=1)
    res = _emulate_combine(hs, CNT, w2, W, E, C, policies=pol)
    for policy in pol:
        _check_outputs(res, policy, ids, packed, hs, w2, wts, W, E, C)


@pytest.mark.parametrize("mode,lowering", [("pull", "auto"), ("push", "table"),
                                           ("pull", "table")])
def test_pull_and_the_chunk_table(mode, lowering):
    """Pulled chunks (the destination reads the count and the rows on the source after its
    PRODUCED flag) and the table lowering (records read at run time) give the same rows."""
    W, E, C, F, H, T, k = 2, 4, 32, 32, 32, 24, 2
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, "random", seed=3)
    pol = ("in-order", "random:1")
    res = _emulate_combine(hs, CNT, w2, W, E, C, mode=mode, policies=pol, lowering=lowering)
    for policy in pol:
        _check_outputs(res, policy, ids, packed, hs, w2, wts, W, E, C)


def test_second_launch_reuses_the_buffers_race_free():
    """Launch 2 stages fresh activations into the buffers and produces into the same ``Y``
    the peers pulled from in launch 1: no race, and the arrived rows equal the unfused kernel's
    outputs on the producing rank (``check=True``)."""
    W, E, C, F, H, T, k = 2, 4, 32, 32, 32, 24, 2
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, "empty", seed=5)
    for mode in ("push", "pull"):
        _emulate_combine(hs, CNT, w2, W, E, C, mode=mode, launches=2,
                         policies=("in-order", "late"))


def test_three_self_advancing_launches_race_free():
    """The runtime's default, ``self_advance="auto"``: three launches, no host advance, the
    arrived rows equal the unfused kernel's every launch and the epoch word ends at 3."""
    W, E, C, F, H, T, k = 2, 4, 32, 32, 32, 24, 2
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, "random", seed=6)
    for mode in ("push", "pull"):
        _emulate_combine(hs, CNT, w2, W, E, C, mode=mode, launches=3,
                         policies=("in-order", "late"), self_advance="auto")


def test_only_counted_rows_move():
    """The emulator copies the counted prefix of each chunk: the rows moved are exactly the
    kept choices that crossed ranks, not the capacity."""
    W, E, C, F, H, T, k = 2, 4, 32, 32, 32, 24, 2
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, "empty", seed=2)
    res = _emulate_combine(hs, CNT, w2, W, E, C, policies=("in-order",))
    El = E // W
    crossing = sum(int(packed[s].counts[d, d * El:(d + 1) * El].sum())
                   for s in range(W) for d in range(W) if s != d)
    assert res.stats["in-order"]["copied_elements"] == crossing * H
    assert crossing * H < W * (W - 1) * El * C * H / 2


@triton.jit
def _gemm_silent_past_count(a_ptr, b_ptr, c_ptr, count_ptr, C, N, K, E, M_out, a_base, a_seg,
                            cnt_base, cnt_seg, stride_am, stride_ak, stride_be, stride_bk,
                            stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The grouped GEMM as it was written for the dispatch alone: the store inside the count
    branch, so a tile past the count neither stores nor signals (row-major tiles: ``GROUP_M``
    is taken for the signature only)."""
    C = tl.maximum(C, 0)
    cnt_base = tl.maximum(cnt_base, 0)
    cnt_seg = tl.maximum(cnt_seg, 0)
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = tl.cdiv(C, BLOCK_M) * num_pid_n
    g = pid // tiles_per_group
    t = pid % tiles_per_group
    pid_m = t // num_pid_n
    pid_n = t % num_pid_n
    expert = g % E
    count = tl.minimum(tl.load(count_ptr + (cnt_base + (g // E) * cnt_seg + expert)), C)
    if pid_m * BLOCK_M < count:
        offs_r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        mask_m = offs_r < count
        mask_n = offs_n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            offs_kk = k * BLOCK_K + offs_k
            a = tl.load(a_ptr + ((g * C + offs_r)[:, None] * stride_am + offs_kk[None, :]),
                        mask=mask_m[:, None] & (offs_kk < K)[None, :], other=0.0)
            b = tl.load(b_ptr + expert * stride_be + offs_kk[:, None] * stride_bk
                        + offs_n[None, :], mask=(offs_kk < K)[:, None] & mask_n[None, :],
                        other=0.0)
            acc = tl.dot(a, b, acc)
        offs_cm = g * C + offs_r
        tl.store(c_ptr + offs_cm[:, None] * stride_cm + offs_n[None, :], acc.to(tl.bfloat16),
                 mask=(mask_m & (offs_cm < M_out))[:, None] & mask_n[None, :])


def test_tiles_past_the_count_must_signal():
    """Why the store sits outside the count branch: with it inside, a group with fewer rows
    than the capacity never completes its PRODUCED flag, and the copier waits forever."""
    W, E, C, F, H, T, k = 2, 4, 32, 32, 32, 24, 2
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, "empty", seed=4)
    res = _emulate_combine(hs, CNT, w2, W, E, C, kernel=_gemm_silent_past_count,
                           policies=("in-order",), check=False)
    assert res.races_of("deadlock"), res.summary()
    assert any("produced" in r.detail.lower() for r in res.races_of("deadlock")), res.summary()


def test_rows_released_but_not_stored_are_caught():
    """The padding exemption is no blanket: a kernel that reads another group's count (here
    0: every rank's ``cnt_base`` points at the next rank's experts) stores nothing, yet every
    tile signals; the copier's count says rows are data, so the flag completing over unstored
    counted rows is reported (early-signal), as is the copy reading them."""
    W, E, C, F, H, T, k = 2, 4, 32, 32, 32, 24, 2
    El = E // W
    ids, packed, CNT, hs, w2, wts = _setup(W, E, C, F, H, T, k, "random", seed=6)
    wrong = [d * E + ((d + 1) % W) * El for d in range(W)]
    res = _emulate_combine(hs, CNT, w2, W, E, C, policies=("in-order",), check=False,
                           cnt_base=wrong)
    assert res.races_of("early-signal"), res.summary()


def test_schedule_verifies_and_refuses_bad_sizes():
    for W, E, mode in ((2, 4, "push"), (4, 8, "pull"), (4, 4, "push")):
        s = moe_combine(W, E, 16, 32, mode=mode)
        assert analyze(s).problems == []
        assert len(s.chunks) == W * (W - 1) * (E // W)   # no empty chunks
    with pytest.raises(ScheduleError, match="do not divide"):
        moe_combine(3, 4, 16, 32)
    with pytest.raises(ScheduleError, match="outputs and counts must be different"):
        moe_combine(2, 4, 16, 32, outputs="CNT")


# ------------------------------------------------------------------------------------------
# The whole layer: dispatch -> activation -> combine
# ------------------------------------------------------------------------------------------

def _emulate_dispatch(xs, CNT, w1, W, E, C, packed, policies):
    El = E // W
    N = w1.shape[2]
    X = torch.cat([p.send.reshape(E * C, -1) for p in packed])
    outs = [torch.full((W * El * C, N), float("nan"), dtype=torch.bfloat16) for _ in range(W)]
    per_rank = [dispatch_args(X, CNT, w1[d * El:(d + 1) * El].contiguous(), outs[d], d, W,
                              E, C, CFG) for d in range(W)]
    sig, cx = compile_args("bf16", CFG)
    return emulate(grouped_gemm_kernel, signature=sig, constexprs=cx,
                   schedule=moe_dispatch(W, E, C, X.shape[1]), operand=DISPATCH_OPERANDS,
                   grid=per_rank[0][1], args=merge_rank_args(per_rank), backend="sm", comm_programs=2,
                   options=CFG.options(), launches=1, policies=policies, check=True)


@pytest.mark.parametrize("W,E,kind", [(2, 4, "random"), (2, 4, "hot"), (4, 8, "empty")])
def test_whole_layer_fused_in_the_emulator(W, E, kind):
    """Both fused kernels as the ops launch them, composed: the dispatch's outputs through a
    SiLU are the combine's activations, the dispatch's counts its counts; every rank's tokens
    against the torch layer ``sum_i w_i * silu(x @ w1[e_i]) @ w2[e_i]`` (dropped choices
    left out), under two interleavings of each kernel."""
    C, Hd, F, k = 16, 32, 32, 2
    T = 24 if kind == "hot" else 16
    El = E // W
    ids, xs, wts, w1, w2 = _layer_inputs(kind, W, T, k, E, Hd, F, seed=11)
    packed = [pack_dispatch(xs[s], ids[s], E, W, C) for s in range(W)]
    CNT = torch.cat([p.counts.reshape(-1) for p in packed]).contiguous()
    pol = ("in-order", "random:2")
    disp = _emulate_dispatch(xs, CNT, w1, W, E, C, packed, pol)
    for policy in pol:
        hs = [silu(torch.from_numpy(np.asarray(disp.outputs[policy][d]["c_ptr"],
                                               dtype=np.float32)).reshape(W * El * C, F))
              .to(torch.bfloat16) for d in range(W)]
        comb = _emulate_combine(hs, CNT, w2, W, E, C, policies=pol)
        for cp in pol:
            for s in range(W):
                Y = torch.from_numpy(np.asarray(comb.outputs[cp][s]["c_ptr"],
                                                dtype=np.float32)).reshape(W * E * C, Hd)
                got = combine_rows(Y.to(torch.bfloat16), fused_rows(packed[s].slot, s, W, E, C),
                                   wts[s], torch.float32)
                ref = layer_reference(xs[s], ids[s], wts[s], w1, w2, C, silu)
                err = float((got - ref).abs().max() / (1 + ref.abs().max()))
                assert err <= RTOL, f"{policy}/{cp} rank {s}: layer off by {err}"


def _layer_in_thread(rank, W, case):
    """One virtual rank of the unfused layer through the public ops (loopback collectives on
    CPU tensors: an all-gather in the dispatch, an all-to-all in the combine)."""
    from types import SimpleNamespace

    from syncopate.ops import moe_dispatch_gemm, moe_gemm_combine
    xs, ids, wts, w1, w2, C = case
    E = w1.shape[0]
    El = E // W
    comm = SimpleNamespace(world_size=W, rank=rank, device=torch.device("cpu"), group=None,
                           cache={})
    mine = slice(rank * El, (rank + 1) * El)
    d = moe_dispatch_gemm(xs[rank], ids[rank], wts[rank], w1[mine].contiguous(), comm,
                          capacity=C, fused=False, on_overflow="drop")
    h = silu(d.out.float()).to(torch.bfloat16)
    return moe_gemm_combine(h, w2[mine].contiguous(), d, comm, fused=False).float()


@pytest.mark.parametrize("W,kind", [(1, "hot"), (2, "random"), (2, "hot"), (4, "empty"),
                                    (4, "hot")])
def test_whole_layer_unfused_ops_in_loopback(W, kind):
    """The reference path of both ops (``fused=False``), composed in loopback threads, against
    the torch layer: the all-to-all brings each expert's rows back in the dispatch's send
    layout, so the slot map indexes them directly. One rank: no collective at all."""
    from syncopate.runtime.loopback import run_loopback
    E, C, Hd, F, k = 2 * W, 128, 32, 32, 2
    T = 160 if kind == "hot" else 48    # hot: 160 first choices for 128 rows
    ids, xs, wts, w1, w2 = _layer_inputs(kind, W, T, k, E, Hd, F, seed=21)
    res = run_loopback(_layer_in_thread, W, (xs, ids, wts, w1, w2, C), timeout_s=120)
    bad = [v for st, v in res if st != "ok"]
    assert not bad, "\n".join(bad)
    for s, (_, got) in enumerate(res):
        ref = layer_reference(xs[s], ids[s], wts[s], w1, w2, C, silu)
        err = float((got - ref).abs().max() / (1 + ref.abs().max()))
        assert err <= RTOL, f"rank {s}: layer off by {err}"
    if kind == "hot":  # the case is what it says: expert 0 overflowed on every rank
        assert all(int((ids[s] == 0).sum()) > C for s in range(W))



@pytest.mark.parametrize("lowering,mode", [("unrolled", "push"), ("table", "pull")])
def test_fused_kernel_compiles_for_sm90(lowering, mode):
    """The whole pipeline, lowering included (what the op's FusedKernel runs on a GPU): the
    grouped GEMM producing the combine's Y at the op's default tiles compiles to an sm_90
    cubin with wgmma and system-scope release signals; the launch-time bound on ``M_out`` is
    the part's rows (the runtime checks it before every launch)."""
    import syncopate
    from syncopate.kernels.grouped_gemm_launch import compile_attrs
    cfg = GroupedGemmConfig()
    sig, cx = compile_args("bf16", cfg)
    W, E, C = 2, 8, 256
    fc = syncopate.compile(grouped_gemm_kernel, signature=sig, constexprs=cx,
                           schedule=moe_combine(W, E, C, 1024, mode=mode), operand=OPERANDS,
                           backend="sm", comm_programs=2, attrs=compile_attrs(),
                           lowering=lowering, **cfg.options())
    ptx = fc.asm["ptx"]
    assert fc.asm["cubin"], "no cubin"
    assert "wgmma.mma_async" in ptx
    assert "atom.global.sys.release.add.u32" in ptx   # PRODUCED += box, a system release
    assert fc.abi.upper_bounds["M_out"] == E * C
