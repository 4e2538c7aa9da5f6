"""The GEMM rows of the benchmark: an op (AG+GEMM, GEMM+RS, GEMM+AR, and the FP8 AG+GEMM and
GEMM+RS) at one shape, every column timed side by side on the same inputs -- the NCCL
collective and the GEMMs alone, the serial paths (NCCL then cuBLAS or our local Triton kernel),
torch's own op (async-TP; for GEMM+AR torch's symmetric-memory all-reduces), and the fused op
(``fused.py``: the default and the sweep, each checked against the reference first).  A column
that cannot run (a torch without the op included) is reported as ``None`` with its error, not
fatal.

GEMM+AR (``--ops ar``, issue 12) is a row-parallel layer, ``A [M, K/W] @ B [K/W, N]`` per
rank summed over ranks, the whole ``[M, N]`` on every rank: LLaMA-70B's MLP down-projection
(N = 8192, K = 28672) at decode and small prefill (M = 1 ... 512 tokens) and at M = 8192.
``torch symm one-shot`` / ``two-shot`` are cuBLAS into a symmetric buffer, then
``torch.ops.symm_mem.one_shot_all_reduce`` / ``two_shot_all_reduce_``. Every fused
configuration must be within 2e-2 relative error of the NCCL path on every rank **and**
bitwise equal on every rank (the op's promise).

FP8 (``--ops ag_fp8,rs_fp8 [--scales row]``): the same columns holding the scaled operations
(``torch._scaled_mm`` for cuBLAS, CUTLASS row-wise; ``fused_all_gather_scaled_matmul`` /
``fused_scaled_matmul_reduce_scatter`` for async-TP). Inputs are e4m3 from random fp32 with
amax scales. Tensor-wise AG uses **one** scale on every rank (its amax over all ranks):
async-TP applies the local ``A_scale`` to the whole gathered A, so only a shared scale gives
every column the same result (ours also takes per-rank scales, docs/fp8.md). The checks: AG
fused bitwise equal to our local kernel on the gathered inputs; RS within 1e-2 relative error
of the unfused path; async-TP and torch within 2e-2.
"""

from __future__ import annotations

from ..kernels.gemm_fp8_launch import make_fp8_launcher, resolve_fp8_config
from ..ops import REGISTRY, ag_gemm, ag_gemm_fp8, gemm_ar, gemm_rs, gemm_rs_fp8
from ..ops.driver import fused_variant, gemm_call, gemm_plan, resolve_config, run_local
from ..ops.gemm_ar import default_plan as ar_plan
from ..ops.gemm_rs import default_plan, epilogue_unavailable
from ..runtime import collectives
from .fused import rel_err, safe, sweep_fused, time_default
from .local_fp8 import quantize

__all__ = ["bench_ag", "bench_ag_fp8", "bench_ar", "bench_rs", "bench_rs_fp8", "check_problems",
           "check_rows", "summary", "symm_op"]


def bench_ag(comm, timer, M, N, K, args, backends, log):
    """The AG+GEMM row: A sharded by rows ([M/W, K] per rank), B by columns ([K, N/W]); the
    fused op must equal the local kernel on the gathered A bit for bit."""
    import torch
    import torch.distributed as dist

    W = comm.world_size
    dtype = getattr(torch, args.dtype)
    Nl, Ms = N // W, M // W
    dev = comm.device
    g = torch.Generator(device=dev)
    g.manual_seed(1 + comm.rank)
    a = torch.randn(Ms, K, generator=g, device=dev).to(dtype)
    b = torch.randn(K, Nl, generator=g, device=dev).to(dtype)
    cfg = resolve_config(args.kernel, M, Nl, K, dtype)
    gathered = torch.empty(M, K, device=dev, dtype=dtype)
    out = torch.empty(M, Nl, device=dev, dtype=dtype)
    r: dict = {"op": "ag_gemm", "M": M, "N": N, "K": K, "N_local": Nl, "config": cfg.as_dict()}
    dist.all_gather_into_tensor(gathered, a)
    ref = torch.empty(M, Nl, device=dev, dtype=dtype)
    run_local(gemm_call(args.kernel, gathered, b, ref, cfg))

    safe(r, "comm", lambda: timer(lambda: dist.all_gather_into_tensor(gathered, a)))
    safe(r, "gemm", lambda: timer(lambda: run_local(gemm_call(args.kernel, gathered, b, out,
                                                               cfg))))
    safe(r, "gemm cuBLAS", lambda: timer(lambda: torch.matmul(gathered, b, out=out)))
    safe(r, "serial cuBLAS", lambda: timer(lambda: (dist.all_gather_into_tensor(gathered, a),
                                                     torch.matmul(gathered, b, out=out))))
    safe(r, "serial triton", lambda: timer(lambda: ag_gemm(a, b, comm, kernel=args.kernel,
                                                             config=cfg, out=out, fused=False)))

    async_tp(r, comm, timer, "fused_all_gather_matmul", ref, lambda res: res[1][0],
             lambda op: op(a, [b], 0, comm.group_name, return_A=False))

    def same_as_local_kernel(res):
        return bool(torch.equal(res, ref))

    def close_to_reference(res):  # the op's own path may be cuBLAS: its rounding, not ours
        return rel_err(res, ref) <= 2e-2

    mismatch = "result differs from the local kernel on the gathered A"
    time_default(r, comm, timer, lambda: ag_gemm(a, b, comm, out=out), close_to_reference,
                 "result differs from the reference", lambda: describe_path(
                     comm, "ag_gemm", (M, Nl, K), dtype, cublas=True))
    sweep_fused(r, comm, timer, backends, args, log,
                lambda **kw: ag_gemm(a, b, comm, kernel=args.kernel, config=cfg, out=out, **kw),
                same_as_local_kernel, mismatch,
                auto=lambda be, red: gemm_plan("ag", be, M, Nl, K, W, dtype, None, None))
    return r


def k_sharded_operands(comm, args, M, N, K, seed: int):
    """The operands of a K-sharded GEMM row (GEMM+RS, GEMM+AR): ``(dtype, K / W, A [M, K/W],
    B [K/W, N], the local kernel's config, a [M, N] partial-sum buffer)``, A and B random from
    ``seed + rank``."""
    import torch

    dtype = getattr(torch, args.dtype)
    Kl = K // comm.world_size
    dev = comm.device
    g = torch.Generator(device=dev)
    g.manual_seed(seed + comm.rank)
    a = torch.randn(M, Kl, generator=g, device=dev).to(dtype)
    b = torch.randn(Kl, N, generator=g, device=dev).to(dtype)
    cfg = resolve_config(args.kernel, M, N, Kl, dtype)
    return dtype, Kl, a, b, cfg, torch.empty(M, N, device=dev, dtype=dtype)


def bench_rs(comm, timer, M, N, K, args, backends, log):
    """The GEMM+RS row: A [M, K/W] and B [K/W, N] per rank, the output [M/W, N]; the fused op
    must be within 2e-2 relative error of the NCCL path."""
    import torch
    import torch.distributed as dist

    W = comm.world_size
    dtype, Kl, a, b, cfg, partial = k_sharded_operands(comm, args, M, N, K, seed=3)
    out = torch.empty(M // W, N, device=comm.device, dtype=dtype)
    r: dict = {"op": "gemm_rs", "M": M, "N": N, "K": K, "K_local": Kl, "config": cfg.as_dict()}
    ref = gemm_rs(a, b, comm, kernel=args.kernel, config=cfg, fused=False).clone()

    safe(r, "comm", lambda: timer(lambda: dist.reduce_scatter_tensor(out, partial)))
    safe(r, "gemm", lambda: timer(lambda: run_local(gemm_call(args.kernel, a, b, partial, cfg))))
    safe(r, "gemm cuBLAS", lambda: timer(lambda: torch.matmul(a, b, out=partial)))
    safe(r, "serial cuBLAS", lambda: timer(lambda: (torch.matmul(a, b, out=partial),
                                                     dist.reduce_scatter_tensor(out, partial))))
    safe(r, "serial triton", lambda: timer(lambda: gemm_rs(a, b, comm, kernel=args.kernel,
                                                             config=cfg, out=out, fused=False)))

    async_tp(r, comm, timer, "fused_matmul_reduce_scatter", ref, lambda c: c,
             lambda op: op(a, b, "sum", 0, comm.group_name))

    def close_to_nccl_path(res):
        return rel_err(res, ref) <= 2e-2

    time_default(r, comm, timer, lambda: gemm_rs(a, b, comm, out=out), close_to_nccl_path,
                 "result differs from the NCCL path",
                 lambda: describe_path(comm, "gemm_rs", (M, N, Kl), dtype, cublas=True))
    sweep_fused(r, comm, timer, backends, args, log,
                # the epilogue variant takes the default config: the op may lower its GROUP_M
                lambda **kw: gemm_rs(a, b, comm, kernel=args.kernel, out=out,
                                     config=None if kw.get("reduce") == "epilogue" else cfg, **kw),
                close_to_nccl_path, "result differs from the NCCL path",
                auto=lambda be, red: default_plan(be, red or "comm", M, N, Kl, W, dtype))
    return r



def describe_path(comm, op, shape, dtype, fused_text=None, *, cublas=False,
                  unavailable=None) -> str:
    """What an op called with no options runs (:func:`syncopate.ops.choice.decide_shape`): the
    unfused path's name, or for a fused variant ``fused_text(candidate)`` (default: its name and
    plan). ``unavailable`` None: what the op's own call leaves out (``GemmLaunch.unavailable``
    with the default config)."""
    spec = REGISTRY[op]
    if unavailable is None:
        g, (m, n, k) = spec.gemm, shape[:3]
        unavailable = () if g is None or g.unavailable is None else g.unavailable(
            m, comm.world_size, resolve_config("tma", m, n, k, dtype), False)
    c = fused_variant(spec, comm, shape, dtype, cublas=cublas, unavailable=unavailable,
                      fused=None).choice
    if c.path != "fused":
        return c.name
    return fused_text(c) if fused_text else f"{c.name} split={c.split} cp={c.comm_programs}"


def async_tp(r, comm, timer, name, ref, result, call):
    """The row's "torch async-TP" column: torch's fused op ``torch.ops.symm_mem.<name>``
    called as ``call(op)``, its output (``result`` of what it returns) checked once against
    ``ref`` within 2e-2 (its own rounding), then timed; a missing op or a mismatch is the
    column's error, not fatal."""
    def run():
        op = symm_op(name)
        _enable_symm_mem(comm)

        def fn():
            return call(op)
        err = rel_err(result(fn()), ref)
        if err > 2e-2:
            raise RuntimeError(f"async-TP result does not match (rel err {err:.3g})")
        return timer(fn)
    safe(r, "torch async-TP", run)


def _enable_symm_mem(comm):
    """torch 2.11 still wants ``enable_symm_mem_for_group`` before the async-TP ops (deprecated
    and a no-op in newer torch)."""
    import warnings

    from torch.distributed import _symmetric_memory as symm_mem
    fn = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if fn is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(comm.group_name)


#: column -> the torch.ops.symm_mem op it needs
SYMM_OPS = {"torch symm one-shot": "one_shot_all_reduce",
            "torch symm two-shot": "two_shot_all_reduce_"}
#: the op's backends: ce is refused by gemm_ar (its side stream cannot forward reduced pieces)
AR_BACKENDS = ("sm", "nvshmem")


def bench_ar(comm, timer, M, N, K, args, backends, log):
    """One gemm_ar row (``K``: the global K; each rank holds ``K / W``)."""
    import torch
    import torch.distributed as dist

    W = comm.world_size
    dtype, Kl, a, b, cfg, partial = k_sharded_operands(comm, args, M, N, K, seed=5)
    dev = comm.device
    out = torch.empty(M, N, device=dev, dtype=dtype)
    r: dict = {"op": "gemm_ar", "M": M, "N": N, "K": K, "K_local": Kl, "config": cfg.as_dict()}
    ref = gemm_ar(a, b, comm, kernel=args.kernel, config=cfg, fused=False).clone()

    safe(r, "comm", lambda: timer(lambda: dist.all_reduce(partial)))
    safe(r, "gemm", lambda: timer(lambda: run_local(gemm_call(args.kernel, a, b, partial, cfg))))
    safe(r, "gemm cuBLAS", lambda: timer(lambda: torch.matmul(a, b, out=partial)))
    safe(r, "serial cuBLAS", lambda: timer(lambda: (torch.matmul(a, b, out=partial),
                                                     dist.all_reduce(partial))))
    safe(r, "serial triton", lambda: timer(lambda: gemm_ar(a, b, comm, kernel=args.kernel,
                                                             config=cfg, out=out, fused=False)))

    def close_to_nccl_path(res):
        return rel_err(res, ref) <= 2e-2

    for col, name in SYMM_OPS.items():
        safe(r, col, lambda name=name: _time_symm(comm, timer, name, a, b, M, N,
                                                   close_to_nccl_path))

    def checked(res):
        """Close to the NCCL path here and bitwise the same on every rank (a collective: every
        rank calls it)."""
        bits = res.contiguous().view(torch.int16)
        every = torch.empty((W,) + tuple(bits.shape), device=dev, dtype=bits.dtype)
        collectives.all_gather_into_tensor(every, bits, group=comm.group)
        return close_to_nccl_path(res) and bool((every == every[0:1]).all())

    mismatch = "result differs from the NCCL path or between ranks"

    def plan(be):  # (order, split, comm programs): the op's own choice on backend ``be``
        return ar_plan(be, M, N, Kl, W, dtype, block_m=int(cfg.BLOCK_M))
    time_default(r, comm, timer, lambda: gemm_ar(a, b, comm, out=out), checked, mismatch,
                 lambda: describe_path(comm, "gemm_ar", (M, N, Kl), dtype, lambda c: (
                     "sm {} split={} cp={}".format(*plan("sm"))), cublas=True))
    for be in backends:
        if be not in AR_BACKENDS:
            r.setdefault("errors", {})[f"fused[{be}]"] = \
                f"gemm_ar runs with {' or '.join(AR_BACKENDS)} (not {be}): see ops/gemm_ar.py"
    sweep_fused(r, comm, timer, [be for be in backends if be in AR_BACKENDS], args, log,
                lambda **kw: gemm_ar(a, b, comm, kernel=args.kernel, config=cfg, out=out, **kw),
                checked, mismatch, auto=lambda be, red: plan(be)[1:])
    return r


def _time_symm(comm, timer, name, a, b, M, N, correct):
    """cuBLAS into a symmetric-memory buffer, then torch's ``name`` all-reduce on it (one-shot
    returns a new tensor; two-shot reduces in place). The buffer is allocated and rendezvoused
    once, outside the timing."""
    import torch
    from torch.distributed import _symmetric_memory as symm_mem
    op = symm_op(name)
    _enable_symm_mem(comm)
    buf = symm_mem.empty((M, N), dtype=a.dtype, device=comm.device)
    symm_mem.rendezvous(buf, comm.group_name)

    def fn():
        torch.matmul(a, b, out=buf)
        return op(buf, "sum", comm.group_name)
    res = fn()
    torch.cuda.synchronize()
    if not correct(res):
        raise RuntimeError(f"torch.ops.symm_mem.{name} result does not match the NCCL path")
    return timer(fn)


def check_rows(comm, args, log):
    """``--check --ops ar``: the fused op once per decode/prefill shape (M = 1, 64, 512 and,
    without ``--quick``, 8192; N = 8192, K = 28672 / W) against the NCCL path, and every rank
    bitwise equal to rank 0. Correctness only: runs in loopback, times nothing."""
    import torch

    W = comm.world_size
    dtype = getattr(torch, args.dtype)
    rows = []
    ms = (1, 64, 512) + (() if args.quick else (8192,))
    for M in ms:
        for N, K in REGISTRY["gemm_ar"].bench.shapes:
            Kl = K // W
            g = torch.Generator(device=comm.device)
            g.manual_seed(7 + comm.rank)
            a = torch.randn(M, Kl, generator=g, device=comm.device).to(dtype)
            b = (torch.randn(Kl, N, generator=g, device=comm.device) / Kl ** 0.5).to(dtype)
            out = torch.full((M, N), float("nan"), device=comm.device, dtype=dtype)
            gemm_ar(a, b, comm, kernel=args.kernel, out=out, fused=True)
            ref = gemm_ar(a, b, comm, kernel=args.kernel, fused=False)
            bits = out.view(torch.int16)
            every = torch.empty((W, M, N), device=comm.device, dtype=torch.int16)
            collectives.all_gather_into_tensor(every, bits, group=comm.group)
            torch.cuda.synchronize()
            comm.check()
            rel = rel_err(out, ref)
            row = {"op": "gemm_ar", "M": M, "N": N, "K": K, "rel_err_vs_nccl": rel,
                   "finite": bool(torch.isfinite(out).all()),
                   "ranks_differ": int((every != every[0:1]).any(dim=0).sum())}
            log(f"gemm_ar M={M} N={N} K={K}: {row}")
            rows.append(row)
    return rows


def summary(r: dict) -> str:
    """One line of a ``--check`` row."""
    return (f"gemm_ar M={r['M']} N={r['N']} K={r['K']}: fused vs NCCL path relative error "
            f"{r['rel_err_vs_nccl']:.3g}, elements differing between ranks {r['ranks_differ']}")


def check_problems(rows) -> list[str]:
    """What is wrong in :func:`check_rows`' rows (empty: all good)."""
    out = []
    for r in rows:
        where = f"gemm_ar M={r['M']} N={r['N']} K={r['K']}"
        if not r["finite"]:
            out.append(f"{where}: NaN/Inf in the result (C incomplete)")
        elif r["rel_err_vs_nccl"] > 2e-2:
            out.append(f"{where}: relative error {r['rel_err_vs_nccl']:.3g} vs the NCCL path")
        if r["ranks_differ"]:
            out.append(f"{where}: {r['ranks_differ']} elements differ between ranks")
    return out


def _weights(g, K, N, rows, dev):
    """Column-major e4m3 B ``[K, N]`` and its scale (``[1, N]`` or one)."""
    import torch
    bt, s = quantize(torch.randn(N, K, generator=g, device=dev), 1 if rows else None)
    return bt.t(), (s.t().contiguous() if rows else s)


def bench_ag_fp8(comm, timer, M, N, K, args, backends, log):
    """The FP8 AG+GEMM row: A ``[M/W, K]`` e4m3 per rank, B ``[K, N/W]`` e4m3 column-major."""
    import torch
    import torch.distributed as dist

    W, dev = comm.world_size, comm.device
    rows = args.scales == "row"
    Nl, Ms = N // W, M // W
    g = torch.Generator(device=dev)
    g.manual_seed(11 + comm.rank)
    a, sa = quantize(torch.randn(Ms, K, generator=g, device=dev), 1 if rows else None,
                     comm.group)
    b, sb = _weights(g, K, Nl, rows, dev)
    cfg = resolve_fp8_config(args.kernel, M, Nl, K)
    A = torch.empty(M, K, device=dev, dtype=a.dtype)
    SA = torch.empty(M, 1, device=dev, dtype=torch.float32)
    out = torch.empty(M, Nl, device=dev, dtype=torch.bfloat16)
    r: dict = {"op": f"ag_gemm_fp8[{args.scales}]", "base_op": "ag_gemm", "M": M, "N": N,
               "K": K, "N_local": Nl, "config": cfg.as_dict()}

    def gather():
        dist.all_gather_into_tensor(A.view(torch.uint8), a.view(torch.uint8))
        if rows:
            dist.all_gather_into_tensor(SA, sa)
    gather()
    if not rows:  # the op gathers a tensor-wise scale as rows too (docs/fp8.md)
        SA.copy_(sa.reshape(1, 1).expand(M, 1))
    ref = ag_gemm_fp8(a, b, sa, sb, comm, kernel=args.kernel, config=cfg, fused=False).clone()
    A_scale = SA if rows else sa
    local, _ = make_fp8_launcher(A, b, SA, sb, out, kernel=args.kernel, config=cfg)
    safe(r, "comm", lambda: timer(gather))
    safe(r, "gemm", lambda: timer(local))
    safe(r, "gemm cuBLAS", lambda: timer(lambda: torch._scaled_mm(
        A, b, A_scale, sb, out_dtype=torch.bfloat16)))
    safe(r, "serial cuBLAS", lambda: timer(lambda: (gather(), torch._scaled_mm(
        A, b, A_scale, sb, out_dtype=torch.bfloat16))))
    safe(r, "serial triton", lambda: timer(lambda: ag_gemm_fp8(
        a, b, sa, sb, comm, kernel=args.kernel, config=cfg, out=out, fused=False)))

    async_tp(r, comm, timer, "fused_all_gather_scaled_matmul", ref, lambda res: res[1][0],
             lambda op: op(a, [b], sa, [sb], 0, comm.group_name, [None], [None],
                           [torch.bfloat16], [False]))

    def same_as_local_kernel(res):
        return bool(torch.equal(res, ref))

    mismatch = "result differs from the local FP8 kernel on the gathered inputs"
    time_default(r, comm, timer, lambda: ag_gemm_fp8(a, b, sa, sb, comm, out=out),
                 same_as_local_kernel, mismatch, lambda: describe_path(
                     comm, "ag_gemm_fp8", (M, Nl, K), "fp8e4m3",
                     lambda c: "{} split={} cp={}".format(c.backend, *gemm_plan(
                         "ag", c.backend, M, Nl, K, W, "fp8e4m3", None, None))))
    sweep_fused(r, comm, timer, backends, args, log,
                lambda **kw: ag_gemm_fp8(a, b, sa, sb, comm, kernel=args.kernel, config=cfg,
                                         out=out, **kw),
                same_as_local_kernel, mismatch,
                auto=lambda be, red: gemm_plan("ag", be, M, Nl, K, W, "fp8e4m3", None, None))
    return r


def bench_rs_fp8(comm, timer, M, N, K, args, backends, log):
    """The FP8 GEMM+RS row: A ``[M, K/W]`` and B ``[K/W, N]`` e4m3 per rank, their own scales."""
    import torch
    import torch.distributed as dist

    W, dev = comm.world_size, comm.device
    rows = args.scales == "row"
    Kl = K // W
    g = torch.Generator(device=dev)
    g.manual_seed(13 + comm.rank)
    a, sa = quantize(torch.randn(M, Kl, generator=g, device=dev), 1 if rows else None)
    b, sb = _weights(g, Kl, N, rows, dev)
    cfg = resolve_fp8_config(args.kernel, M, N, Kl)
    partial = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    out = torch.empty(M // W, N, device=dev, dtype=torch.bfloat16)
    r: dict = {"op": f"gemm_rs_fp8[{args.scales}]", "base_op": "gemm_rs", "M": M, "N": N,
               "K": K, "K_local": Kl, "config": cfg.as_dict()}
    ref = gemm_rs_fp8(a, b, sa, sb, comm, kernel=args.kernel, config=cfg, fused=False).clone()
    local, _ = make_fp8_launcher(a, b, sa, sb, partial, kernel=args.kernel, config=cfg)

    safe(r, "comm", lambda: timer(lambda: dist.reduce_scatter_tensor(out, partial)))
    safe(r, "gemm", lambda: timer(local))
    safe(r, "gemm cuBLAS", lambda: timer(lambda: torch._scaled_mm(
        a, b, sa, sb, out_dtype=torch.bfloat16)))
    safe(r, "serial cuBLAS", lambda: timer(lambda: dist.reduce_scatter_tensor(
        out, torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))))
    safe(r, "serial triton", lambda: timer(lambda: gemm_rs_fp8(
        a, b, sa, sb, comm, kernel=args.kernel, config=cfg, out=out, fused=False)))

    async_tp(r, comm, timer, "fused_scaled_matmul_reduce_scatter", ref, lambda c: c,
             lambda op: op(a, b, sa, sb, "sum", 0, 0, comm.group_name, [M, N],
                           out_dtype=torch.bfloat16))

    def close_to_unfused(res):
        return rel_err(res, ref) <= 1e-2

    def rs_default():
        def fused(c):
            split, cp = default_plan(c.backend, c.reduce, M, N, Kl, W, "fp8e4m3")
            return (f"{c.backend}{'+epilogue' if c.reduce == 'epilogue' else ''} split={split} "
                    f"cp={cp}")
        return describe_path(comm, "gemm_rs_fp8", (M, N, Kl), "fp8e4m3", fused,
                             unavailable=epilogue_unavailable(M, W, cfg, False))
    time_default(r, comm, timer, lambda: gemm_rs_fp8(a, b, sa, sb, comm, out=out),
                 close_to_unfused, "result differs from the unfused path", rs_default)
    sweep_fused(r, comm, timer, backends, args, log,
                lambda **kw: gemm_rs_fp8(a, b, sa, sb, comm, kernel=args.kernel, out=out,
                                         config=None if kw.get("reduce") == "epilogue" else cfg,
                                         **kw),
                close_to_unfused, "result differs from the unfused path",
                auto=lambda be, red: default_plan(be, red or "comm", M, N, Kl, W, "fp8e4m3"))
    return r


def symm_op(name: str):
    """``torch.ops.symm_mem.<name>``, or a RuntimeError saying this torch lacks it (a peer
    column torch does not have is reported in the row's errors, not fatal)."""
    import torch
    try:
        return getattr(getattr(torch.ops, "symm_mem", None), name)
    except (AttributeError, RuntimeError):
        raise RuntimeError(f"torch.ops.symm_mem.{name} is absent in this torch "
                           f"({torch.__version__})") from None
