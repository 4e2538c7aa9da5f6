"""One benchmark row: an op (AG+GEMM or GEMM+RS) at one shape, every column timed side by
side on the same inputs -- the NCCL collective and the GEMMs alone, the serial paths (NCCL then
cuBLAS or our local Triton kernel), torch's async-TP op, and the fused op (``fused.py``: the
default and the sweep, each checked against the reference first).  A column that cannot run
is reported as ``None`` with its error, not fatal.
"""

from __future__ import annotations

from .fused import error_text, sweep_fused, time_default

__all__ = ["bench_ag", "bench_rs"]


def _safe(results, name, fn):
    try:
        results[name] = fn()
    except Exception as e:  # noqa: BLE001 - a column that cannot run is reported, not fatal
        results[name] = None
        results.setdefault("errors", {})[name] = error_text(e)


def bench_ag(comm, timer, M, N, K, args, backends, log):
    """The AG+GEMM row: A sharded by rows ([M/W, K] per rank), B by columns ([K, N/W]); the
    fused op must equal the local kernel on the gathered A bit for bit."""
    import torch
    import torch.distributed as dist

    from ..ops import ag_gemm
    from ..ops.driver import gemm_call, gemm_plan, resolve_config, run_local
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

    _safe(r, "comm", lambda: timer(lambda: dist.all_gather_into_tensor(gathered, a)))
    _safe(r, "gemm", lambda: timer(lambda: run_local(gemm_call(args.kernel, gathered, b, out,
                                                               cfg))))
    _safe(r, "gemm cuBLAS", lambda: timer(lambda: torch.matmul(gathered, b, out=out)))
    _safe(r, "serial cuBLAS", lambda: timer(lambda: (dist.all_gather_into_tensor(gathered, a),
                                                     torch.matmul(gathered, b, out=out))))
    _safe(r, "serial triton", lambda: timer(lambda: ag_gemm(a, b, comm, kernel=args.kernel,
                                                             config=cfg, out=out, fused=False)))

    def async_tp():
        _enable_symm_mem(comm)
        def fn():
            return torch.ops.symm_mem.fused_all_gather_matmul(a, [b], 0, comm.group_name,
                                                              return_A=False)
        _, (c,) = fn()
        if (c.float() - ref.float()).norm() / ref.float().norm() > 2e-2:
            raise RuntimeError("async-TP result does not match the reference")
        return timer(fn)
    _safe(r, "torch async-TP", async_tp)

    def same_as_local_kernel(res):
        return bool(torch.equal(res, ref))

    def close_to_reference(res):  # the op's own path may be cuBLAS: its rounding, not ours
        return float((res.float() - ref.float()).norm() / ref.float().norm()) <= 2e-2

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

    from ..ops.driver import resolve_config
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

    from ..ops import gemm_rs
    from ..ops.driver import gemm_call, run_local
    from ..ops.gemm_rs import default_plan
    W = comm.world_size
    dtype, Kl, a, b, cfg, partial = k_sharded_operands(comm, args, M, N, K, seed=3)
    out = torch.empty(M // W, N, device=comm.device, dtype=dtype)
    r: dict = {"op": "gemm_rs", "M": M, "N": N, "K": K, "K_local": Kl, "config": cfg.as_dict()}
    ref = gemm_rs(a, b, comm, kernel=args.kernel, config=cfg, fused=False).clone()

    _safe(r, "comm", lambda: timer(lambda: dist.reduce_scatter_tensor(out, partial)))
    _safe(r, "gemm", lambda: timer(lambda: run_local(gemm_call(args.kernel, a, b, partial, cfg))))
    _safe(r, "gemm cuBLAS", lambda: timer(lambda: torch.matmul(a, b, out=partial)))
    _safe(r, "serial cuBLAS", lambda: timer(lambda: (torch.matmul(a, b, out=partial),
                                                     dist.reduce_scatter_tensor(out, partial))))
    _safe(r, "serial triton", lambda: timer(lambda: gemm_rs(a, b, comm, kernel=args.kernel,
                                                             config=cfg, out=out, fused=False)))

    def async_tp():
        _enable_symm_mem(comm)
        def fn():
            return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, comm.group_name)
        c = fn()
        if (c.float() - ref.float()).norm() / ref.float().norm() > 2e-2:
            raise RuntimeError("async-TP result does not match the reference")
        return timer(fn)
    _safe(r, "torch async-TP", async_tp)

    def close_to_nccl_path(res):
        return float((res.float() - ref.float()).norm() / ref.float().norm()) <= 2e-2

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
    from ..ops import REGISTRY
    from ..ops.driver import fused_variant, resolve_config
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
