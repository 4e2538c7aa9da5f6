"""The FP8 ops (``ag_gemm_fp8``, ``gemm_rs_fp8``) as they build their fused kernels, in the CPU
emulator, against ``torch._scaled_mm`` on the collected inputs (issue 13, section 3).

Why these tests: the ops run on GPUs only, but what they hand the compiler -- the local FP8
kernel, its arguments in parameter order (``fp8_args``, the launcher's own), the per-row scales
staged next to A's rows (``row_scales``), the ``scaled_all_gather`` schedule of A **and** its
scales bound by ``OPERAND`` (AG), the bf16 ``reduce_scatter`` of the scaled partials (RS) -- is
built here as the ops build it and emulated for W = 2 and 4 under several interleavings with
the race checker on (``check=True`` also compares the fused outputs with the unfused kernel
emulated on the collected inputs: bitwise for AG, within the reduction's rounding for RS).

The e4m3 operands are rounded by ``torch.float8_e4m3fn`` (numpy has none); the emulator keeps
fp8 values as exact float32 (docs/emulator.md). The comparison with ``torch._scaled_mm``
(torch's CPU implementation) allows one bf16 rounding plus fp32 summation-order differences:
the emulator does not model Hopper's reduced-precision FP8 accumulation (the GPU tests do).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from syncopate.emulate import PerRank, emulate, emulate_module, fuse_module  # noqa: E402
from syncopate.emulate import mutations as mu  # noqa: E402
from syncopate.kernels.gemm_fp8 import fp8_kernel_fn  # noqa: E402
from syncopate.kernels.gemm_fp8_config import (Fp8GemmConfig, fp8_compile_args,  # noqa: E402
                                               fp8_compile_attrs)
from syncopate.kernels.gemm_fp8_launch import Fp8Problem, fp8_args  # noqa: E402
from syncopate.ops._fp8 import row_scales  # noqa: E402
from syncopate.ops.ag_gemm_fp8 import OPERAND, ag_gemm_fp8_schedule  # noqa: E402
from syncopate.schedule import reduce_scatter  # noqa: E402

CFG = Fp8GemmConfig(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
PROGRAMS = 4
POLICIES = ("in-order", "reverse", "late", "random:2")
F8 = torch.float8_e4m3fn


def _fp8(g, *shape):
    return (torch.randn(*shape, generator=g) * 2).to(F8)


def _scale(g, rows: bool, *shape):
    return (torch.rand(*shape, generator=g) + 0.5) if rows else torch.rand((), generator=g) + 0.5


def _emulate(kernel, sched, operand, values, prob, per_rank=(), mutate=None, **kw):
    """Emulate ``kernel`` with the argument list ``values`` (``fp8_args``'s, constexprs in
    position); names in ``per_rank`` hold a list of per-rank values. ``mutate(module)``: plant
    a bug in the fused module first (``syncopate.emulate.mutations``)."""
    sig, cx = fp8_compile_args(kernel, CFG, sa_rows=prob.sa_rows, sb_cols=prob.sb_cols,
                               num_sms=PROGRAMS)
    fn = fp8_kernel_fn(kernel)
    args = {}
    for name, v in zip(fn.arg_names, values):
        if sig[name] == "constexpr":
            continue
        args[name] = PerRank(v) if name in per_rank else v
    scalars = tuple(n for n in ("scale_a_ptr", "scale_b_ptr")
                    if not (prob.sa_rows if n == "scale_a_ptr" else prob.sb_cols))
    tiles = (-(-prob.M // CFG.BLOCK_M)) * (-(-prob.N // CFG.BLOCK_N))
    grid = (PROGRAMS,) if kernel == "tma" else (tiles,)
    attrs = fp8_compile_attrs(kernel, scalar_scales=scalars)
    if mutate is not None:
        module, local = fuse_module(fn, signature=sig, constexprs=cx, attrs=attrs,
                                    schedule=sched, operand=operand, backend=kw.pop("backend"),
                                    comm_programs=kw.pop("comm_programs"),
                                    options=CFG.options())
        return emulate_module(mutate(module), local, grid=grid, args=args, **kw)
    return emulate(fn, signature=sig, constexprs=cx, attrs=attrs, schedule=sched,
                   operand=operand, grid=grid, args=args, options=CFG.options(), **kw)


def _close(got, ref, mag, what, mag_eps=2.0 ** -18):
    """Within one bf16 rounding of ``ref`` (``2^-7 |ref|`` covers one ulp either side) plus
    ``mag_eps * mag``: fp32 summation-order error of ``mag = |A| @ |B| * |sa| * |sb|`` by
    default."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    bad = np.abs(got - ref) > 2.0 ** -7 * np.abs(ref) + mag_eps * np.asarray(mag)
    assert not bad.any(), f"{what}: {int(bad.sum())} elements off, max |d| = " \
                          f"{np.abs(got - ref).max()}"


# ---------------------------------------------------------------------------------------------
# all-gather + GEMM
# ---------------------------------------------------------------------------------------------

def _ag(W, kernel, rows_a, rows_b, *, backend="sm", Ms=64, N=64, K=96, split=2, seed=0,
        same_scale=False, launches=1, policies=POLICIES, **kw):
    g = torch.Generator().manual_seed(seed)
    M = Ms * W
    shards = [_fp8(g, Ms, K) for _ in range(W)]
    common = _scale(g, False)
    scales = [common if same_scale else _scale(g, rows_a, Ms, 1) for _ in range(W)]
    b = _fp8(g, N, K).t()                                   # column-major [K, N]
    sb = _scale(g, rows_b, 1, N)
    A = torch.cat(shards)                                   # rank r stages rows r (the op)
    SA = torch.cat([row_scales(s, Ms) for s in scales]).contiguous()
    out = torch.zeros(M, N, dtype=torch.bfloat16)
    prob = Fp8Problem(M, N, K, True, rows_b)
    values, _ = fp8_args(kernel, A, b, out, SA, sb, prob, CFG, programs=PROGRAMS)
    mode = "pull" if backend == "ce" else "push"
    sched = ag_gemm_fp8_schedule(M, K, W, split=split, mode=mode)
    res = _emulate(kernel, sched, OPERAND, values, prob, backend=backend, comm_programs=2,
                   policies=policies, launches=launches, **kw)
    return res, shards, scales, b, sb


def _ag_reference(shards, scales, b, sb):
    """torch._scaled_mm of each rank's rows (the collected inputs: its shard, its scale)."""
    ref = torch.cat([torch._scaled_mm(a, b, s, sb, out_dtype=torch.bfloat16)
                     for a, s in zip(shards, scales)])
    mag = torch.cat([(a.float().abs() @ b.float().abs()) * s.abs() * sb.abs()
                     for a, s in zip(shards, scales)])
    return ref.float().numpy(), mag.numpy()


@pytest.mark.parametrize("rows", [False, True], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("kernel", ["ptr", "tma"])
@pytest.mark.parametrize("W", [2, 4])
def test_ag_gemm_fp8_matches_scaled_mm(W, kernel, rows):
    """Tensor-wise scales differ per rank (each shard quantised with its own amax): every
    rank's rows of C are ``torch._scaled_mm`` of that shard with its scale."""
    res, shards, scales, b, sb = _ag(W, kernel, rows, rows, check=True)
    ref, mag = _ag_reference(shards, scales, b, sb)
    M, N = ref.shape
    for policy in POLICIES:
        for r in range(W):
            c = np.asarray(res.outputs[policy][r]["c_ptr"]).reshape(M, N)
            _close(c, ref, mag, f"{policy} rank {r}")
    assert sum(s["transfers"] for s in res.stats.values()) > 0


def test_ag_gemm_fp8_shared_tensor_scale_is_scaled_mm_of_the_gathered_a():
    """One tensor-wise scale on every rank: C is ``torch._scaled_mm(all_gather(A), B, s, sb)``."""
    res, shards, scales, b, sb = _ag(2, "tma", False, False, same_scale=True, check=True)
    ref = torch._scaled_mm(torch.cat(shards), b, scales[0], sb, out_dtype=torch.bfloat16)
    mag = (torch.cat(shards).float().abs() @ b.float().abs()) * scales[0] * sb
    c = np.asarray(res.outputs["late"][1]["c_ptr"]).reshape(ref.shape)
    _close(c, ref.float().numpy(), mag.numpy(), "late rank 1")


@pytest.mark.parametrize("W,backend,lowering", [(2, "ce", "auto"), (4, "ce", "auto"),
                                                (2, "nvshmem", "auto"), (2, "sm", "table"),
                                                (4, "sm", "table")])
def test_ag_gemm_fp8_backends_and_table_two_launches(W, backend, lowering):
    """Two launches (fresh inputs in the second: staging after the peers' reads), the other
    backends and the chunk-table lowering; clean and equal to the unfused kernel."""
    res, *_ = _ag(W, "tma", True, False, backend=backend, launches=2, lowering=lowering,
                  policies=("in-order", "late", "behind:0", "random:4"), check=True)
    assert res.ok


@pytest.mark.parametrize("kernel", ["ptr", "tma"])
def test_ag_gemm_fp8_scale_reads_wait_for_their_chunk(kernel):
    """The compiler guards the epilogue's scale loads with the scales' own chunks: the fused
    module has a compute wait for every SA chunk, and with one of them dropped the checker
    reports the kernel reading SA before it arrived (at the scale load of gemm_fp8.py). The
    A chunk of the same rows arrives at the same step, so only interleavings where the scale's
    copy lags behind show it: random ones, yielding at every access (``fine``)."""
    W, Ms, K = 2, 64, 96
    sched = ag_gemm_fp8_schedule(Ms * W, K, W, split=2, mode="push")
    sa_chunks = [c.id for c in sched.chunks if c.tensor == "SA"]
    assert len(sa_chunks) == W * (W - 1) * 2
    res, *_ = _ag(W, kernel, True, True, mutate=lambda m: mu.drop_wait(m, chunk=sa_chunks[0]),
                  policies=("in-order", "late", "random:1", "random:4", "random:15"),
                  launches=2, check=False, fine=True)
    races = res.races_of("read-before-arrival")
    assert races and {r.chunk for r in races} == {sa_chunks[0]}, res.summary()
    assert all("gemm_fp8.py" in r.loc and "compute program" in r.program for r in races)
    assert "SA" in " ".join(r.detail for r in races)


# ---------------------------------------------------------------------------------------------
# GEMM + reduce-scatter
# ---------------------------------------------------------------------------------------------

def _rs(W, kernel, rows, *, backend="sm", reduce="comm", M=None, N=64, Kl=64, seed=1,
        launches=1, policies=POLICIES, **kw):
    g = torch.Generator().manual_seed(seed)
    M = M or 64 * W
    a = [_fp8(g, M, Kl) for _ in range(W)]
    b = [_fp8(g, N, Kl).t() for _ in range(W)]
    sa = [_scale(g, rows, M, 1) for _ in range(W)]
    sb = [_scale(g, rows, 1, N) for _ in range(W)]
    C = torch.zeros(M, N, dtype=torch.bfloat16)
    prob = Fp8Problem(M, N, Kl, rows, rows)
    per = [fp8_args(kernel, a[r], b[r], C, sa[r], sb[r], prob, CFG, programs=PROGRAMS)[0]
           for r in range(W)]
    values = [list(v) for v in zip(*per)]
    names = fp8_kernel_fn(kernel).arg_names
    values = [v if n in ("a_ptr", "b_ptr", "scale_a_ptr", "scale_b_ptr") else v[0]
              for n, v in zip(names, values)]
    sched = reduce_scatter([M, N], "bf16", W, split=2, mode="push")
    res = _emulate(kernel, sched, "c_ptr", values, prob,
                   per_rank=("a_ptr", "b_ptr", "scale_a_ptr", "scale_b_ptr"), backend=backend,
                   reduce=reduce, comm_programs=None if reduce == "epilogue" else 2,
                   policies=policies, launches=launches, **kw)
    partials = [torch._scaled_mm(a[r], b[r], sa[r], sb[r], out_dtype=torch.bfloat16).float()
                for r in range(W)]
    ref = torch.stack(partials).sum(0).to(torch.bfloat16).float().numpy()
    mag = torch.stack([p.abs() for p in partials]).sum(0).numpy()
    return res, ref, mag


@pytest.mark.parametrize("rows", [False, True], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("kernel", ["ptr", "tma"])
@pytest.mark.parametrize("W", [2, 4])
def test_gemm_rs_fp8_matches_scaled_mm_sum(W, kernel, rows):
    """Each rank's rows are the sum over ranks of ``torch._scaled_mm`` of that rank's K slice
    with that rank's scales (scales applied before the reduction, bf16 partials)."""
    res, ref, mag = _rs(W, kernel, rows, check=True)
    rows_per = ref.shape[0] // W
    for policy in POLICIES:
        for r in range(W):
            c = np.asarray(res.outputs[policy][r]["c_ptr"]).reshape(ref.shape)
            sl = slice(r * rows_per, (r + 1) * rows_per)
            # each bf16 partial may differ from torch's by one rounding (2^-8 of its magnitude)
            _close(c[sl], ref[sl], mag[sl], f"{policy} rank {r}", mag_eps=2.0 ** -8)


@pytest.mark.parametrize("W,backend", [(2, "ce"), (4, "ce"), (2, "nvshmem")])
def test_gemm_rs_fp8_other_backends_two_launches(W, backend):
    """The copy engine (the host sums the slots after the kernel) and nvshmem; two launches."""
    res, ref, mag = _rs(W, "tma", False, backend=backend, launches=2,
                        policies=("in-order", "late", "random:2"), check=True)
    assert res.ok


@pytest.mark.parametrize("W", [2, 4])
def test_gemm_rs_fp8_epilogue_variant(W):
    """``backend='ce', reduce='epilogue'`` (the bf16 op's default on long GEMMs): the owner's
    tiles add the peers' scaled partials before their store. Two launches."""
    res, ref, mag = _rs(W, "tma", True, backend="ce", reduce="epilogue", launches=2,
                        policies=("in-order", "reverse", "random:1"), check=True)
    assert res.ok


# ---------------------------------------------------------------------------------------------
# The emulator's fp8 storage and pointer arguments
# ---------------------------------------------------------------------------------------------

def test_fp8_rounding_is_sm90_satfinite_rne():
    """Stores and conversions to e4m3 round to nearest even (torch's cast) after clamping to
    +-448 as ``cvt.rn.satfinite`` does on sm_90 (torch alone would give NaN past 448)."""
    from syncopate.emulate.memory import etype_named, to_etype
    et = etype_named("fp8e4m3")
    assert et.name == "f8E4M3FN" and et.bits == 8 and et.is_f8
    x = np.array([0.3, -1.0625, 17.0, 449.0, 1e6, -np.inf, np.nan, 3 * 2.0 ** -9], np.float32)
    got = to_etype(x, et)
    want = torch.from_numpy(np.clip(x, -448, 448)).to(F8).float().numpy()
    assert np.array_equal(got[:6], [0.3125, -1.0, 16.0, 448.0, 448.0, -448.0])
    assert np.isnan(got[6]) and got[7] == want[7] == 3 * 2.0 ** -9  # a subnormal, exact
    assert np.array_equal(got[:6], want[:6])


def test_pointer_arguments_are_passed_as_their_memory():
    """A column-major ``w.t()`` is what the kernel sees: its ``[N, K]`` rows, not the logical
    ``[K, N]`` flattening."""
    from syncopate.emulate.arguments import memory_of
    w = torch.arange(12.0).reshape(3, 4)
    assert np.array_equal(memory_of(w.t()), np.arange(12.0))
    assert np.array_equal(memory_of(w[:, :2]), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert np.array_equal(memory_of(w), np.arange(12.0))
