"""FP8 rows of the benchmark: ``python -m syncopate.bench --ops ag_fp8,rs_fp8 [--scales row]``.

Same columns and names as the bf16 rows (:mod:`.rows`), with the scaled operations in them:

* ``gemm cuBLAS`` -- ``torch._scaled_mm`` alone (cuBLAS tensor-wise, CUTLASS row-wise);
* ``serial cuBLAS`` -- NCCL (A as bytes, and A's per-row scales for AG) then ``torch._scaled_mm``;
* ``serial triton`` -- the op's unfused path (NCCL + our local FP8 kernel);
* ``torch async-TP`` -- ``torch.ops.symm_mem.fused_all_gather_scaled_matmul`` /
  ``fused_scaled_matmul_reduce_scatter``, the peer column; when torch lacks the op, or it
  raises, the column is None and ``errors["torch async-TP"]`` says why (a missing op says so:
  "absent in this torch");
* ``gemm`` -- our FP8 kernel alone; ``comm`` -- the NCCL collective alone; ``fused default`` and
  ``fused[<backend>]`` -- :func:`~syncopate.ops.ag_gemm_fp8` / :func:`~syncopate.ops.gemm_rs_fp8`,
  each checked before it is timed.

Inputs: e4m3 from random fp32 with amax scales. Tensor-wise AG uses **one** scale on every rank
(its amax over all ranks): async-TP applies the local ``A_scale`` to the whole gathered A, so
only a shared scale gives every column the same result (ours also takes per-rank scales,
docs/fp8.md). The checks: AG fused bitwise equal to our local kernel on the gathered inputs;
RS within 1e-2 relative error of the unfused path; async-TP and torch within 2e-2.
"""

from __future__ import annotations

from .fused import sweep_fused, time_default
from .local_fp8 import quantize
from .rows import _enable_symm_mem, _safe, describe_path

__all__ = ["bench_ag_fp8", "bench_rs_fp8"]


def _weights(g, K, N, rows, dev):
    """Column-major e4m3 B ``[K, N]`` and its scale (``[1, N]`` or one)."""
    import torch
    bt, s = quantize(torch.randn(N, K, generator=g, device=dev), 1 if rows else None)
    return bt.t(), (s.t().contiguous() if rows else s)


def _async_tp_op(name):
    import torch
    op = getattr(getattr(torch.ops, "symm_mem", None), name, None)
    if op is None:
        raise RuntimeError(f"torch.ops.symm_mem.{name} is absent in this torch "
                           f"({torch.__version__}): no async-TP FP8 column")
    return op


def _rel(x, ref):
    return float((x.float() - ref.float()).norm() / ref.float().norm())


def bench_ag_fp8(comm, timer, M, N, K, args, backends, log):
    """The FP8 AG+GEMM row: A ``[M/W, K]`` e4m3 per rank, B ``[K, N/W]`` e4m3 column-major."""
    import torch
    import torch.distributed as dist

    from ..kernels.gemm_fp8_launch import make_fp8_launcher, resolve_fp8_config
    from ..ops import ag_gemm_fp8
    from ..ops.driver import gemm_plan
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
    _safe(r, "comm", lambda: timer(gather))
    _safe(r, "gemm", lambda: timer(local))
    _safe(r, "gemm cuBLAS", lambda: timer(lambda: torch._scaled_mm(
        A, b, A_scale, sb, out_dtype=torch.bfloat16)))
    _safe(r, "serial cuBLAS", lambda: timer(lambda: (gather(), torch._scaled_mm(
        A, b, A_scale, sb, out_dtype=torch.bfloat16))))
    _safe(r, "serial triton", lambda: timer(lambda: ag_gemm_fp8(
        a, b, sa, sb, comm, kernel=args.kernel, config=cfg, out=out, fused=False)))

    def async_tp():
        op = _async_tp_op("fused_all_gather_scaled_matmul")
        _enable_symm_mem(comm)

        def fn():
            return op(a, [b], sa, [sb], 0, comm.group_name, [None], [None], [torch.bfloat16],
                      [False])
        _, (c,) = fn()
        if _rel(c, ref) > 2e-2:
            raise RuntimeError(f"async-TP result does not match (rel err {_rel(c, ref):.3g})")
        return timer(fn)
    _safe(r, "torch async-TP", async_tp)

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

    from ..kernels.gemm_fp8_launch import make_fp8_launcher, resolve_fp8_config
    from ..ops import gemm_rs_fp8
    from ..ops.gemm_rs import default_plan
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

    _safe(r, "comm", lambda: timer(lambda: dist.reduce_scatter_tensor(out, partial)))
    _safe(r, "gemm", lambda: timer(local))
    _safe(r, "gemm cuBLAS", lambda: timer(lambda: torch._scaled_mm(
        a, b, sa, sb, out_dtype=torch.bfloat16)))
    _safe(r, "serial cuBLAS", lambda: timer(lambda: dist.reduce_scatter_tensor(
        out, torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))))
    _safe(r, "serial triton", lambda: timer(lambda: gemm_rs_fp8(
        a, b, sa, sb, comm, kernel=args.kernel, config=cfg, out=out, fused=False)))

    def async_tp():
        op = _async_tp_op("fused_scaled_matmul_reduce_scatter")
        _enable_symm_mem(comm)

        def fn():
            return op(a, b, sa, sb, "sum", 0, 0, comm.group_name, [M, N],
                      out_dtype=torch.bfloat16)
        c = fn()
        if _rel(c, ref) > 2e-2:
            raise RuntimeError(f"async-TP result does not match (rel err {_rel(c, ref):.3g})")
        return timer(fn)
    _safe(r, "torch async-TP", async_tp)

    def close_to_unfused(res):
        return _rel(res, ref) <= 1e-2

    def rs_default():
        from ..ops.gemm_rs import epilogue_unavailable
        un = epilogue_unavailable(M, W, cfg, False)

        def fused(c):
            split, cp = default_plan(c.backend, c.reduce, M, N, Kl, W, "fp8e4m3")
            return (f"{c.backend}{'+epilogue' if c.reduce == 'epilogue' else ''} split={split} "
                    f"cp={cp}")
        return describe_path(comm, "gemm_rs_fp8", (M, N, Kl), "fp8e4m3", fused,
                             unavailable=un)
    time_default(r, comm, timer, lambda: gemm_rs_fp8(a, b, sa, sb, comm, out=out),
                 close_to_unfused, "result differs from the unfused path", rs_default)
    sweep_fused(r, comm, timer, backends, args, log,
                lambda **kw: gemm_rs_fp8(a, b, sa, sb, comm, kernel=args.kernel, out=out,
                                         config=None if kw.get("reduce") == "epilogue" else cfg,
                                         **kw),
                close_to_unfused, "result differs from the unfused path",
                auto=lambda be, red: default_plan(be, red or "comm", M, N, Kl, W, "fp8e4m3"))
    return r
