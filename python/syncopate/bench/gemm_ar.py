"""The GEMM + all-reduce row of ``python -m syncopate.bench --ops ar`` (issue 12): a
row-parallel layer, ``A [M, K/W] @ B [K/W, N]`` per rank, summed over ranks, the whole
``[M, N]`` on every rank.

Columns, side by side on the same inputs: ``comm`` (NCCL all-reduce of the ``[M, N]`` partial
alone), ``gemm`` / ``gemm cuBLAS`` (this rank's GEMM alone), ``serial cuBLAS`` (cuBLAS then
NCCL all-reduce), ``serial triton`` (the op's unfused path: our local kernel then NCCL),
``torch symm one-shot`` / ``torch symm two-shot`` (cuBLAS into a symmetric buffer, then
``torch.ops.symm_mem.one_shot_all_reduce`` / ``two_shot_all_reduce_``: torch's own
symmetric-memory all-reduces, where this torch has them -- a missing op is reported in the
row's errors, not fatal), and the fused op (default, and a sweep per backend).

Every fused configuration is checked before it is timed: within 2e-2 relative error of the
NCCL path on every rank **and** bitwise equal on every rank (the op's promise).

Shapes: LLaMA-70B's row-parallel MLP down-projection (N = 8192, K = 28672, K/W per rank) at
decode and small prefill (M = 1 ... 512 tokens) and at M = 8192; ``--m`` picks others.
"""

from __future__ import annotations

from ..ops import REGISTRY, gemm_ar
from ..ops.driver import gemm_call, run_local
from ..ops.gemm_ar import default_plan
from ..runtime import collectives
from .fused import rel_err, safe, sweep_fused, time_default
from .rows import _enable_symm_mem as enable
from .rows import describe_path, k_sharded_operands

__all__ = ["AR_M", "AR_M_QUICK", "AR_SHAPES", "bench_ar", "SYMM_OPS"]

#: (N, K): LLaMA-70B down-projection, K split over the ranks, at decode / small prefill M and
#: 8192 (``--quick``: two of them): the op's standard rows (``OpSpec.bench``)
AR_SHAPES = list(REGISTRY["gemm_ar"].bench.shapes)
AR_M, AR_M_QUICK = REGISTRY["gemm_ar"].bench.ms
#: column -> the torch.ops.symm_mem op it needs
SYMM_OPS = {"torch symm one-shot": "one_shot_all_reduce",
            "torch symm two-shot": "two_shot_all_reduce_"}
#: the op's backends: ce is refused by gemm_ar (its side stream cannot forward reduced pieces)
AR_BACKENDS = ("sm", "nvshmem")


def symm_op(name: str):
    """``torch.ops.symm_mem.<name>``, or a RuntimeError saying this torch lacks it."""
    import torch
    ops = getattr(torch.ops, "symm_mem", None)
    try:
        return getattr(ops, name)
    except (AttributeError, RuntimeError):
        raise RuntimeError(f"torch {torch.__version__} has no torch.ops.symm_mem.{name}") \
            from None


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
        return rel_err(res, ref) \
            <= 2e-2

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

    def describe():

        def fused(c):
            order, split, cp = default_plan("sm", M, N, Kl, W, dtype, block_m=int(cfg.BLOCK_M))
            return f"sm {order} split={split} cp={cp}"
        return describe_path(comm, "gemm_ar", (M, N, Kl), dtype, fused, cublas=True)
    time_default(r, comm, timer, lambda: gemm_ar(a, b, comm, out=out), checked, mismatch,
                 describe)
    for be in backends:
        if be not in AR_BACKENDS:
            r.setdefault("errors", {})[f"fused[{be}]"] = \
                f"gemm_ar runs with {' or '.join(AR_BACKENDS)} (not {be}): see ops/gemm_ar.py"
    sweep_fused(r, comm, timer, [be for be in backends if be in AR_BACKENDS], args, log,
                lambda **kw: gemm_ar(a, b, comm, kernel=args.kernel, config=cfg, out=out, **kw),
                checked, mismatch,
                auto=lambda be, red: default_plan(be, M, N, Kl, W, dtype,
                                                  block_m=int(cfg.BLOCK_M))[1:])
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


def _enable_symm_mem(comm):
    enable(comm)


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
        for N, K in AR_SHAPES:
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
