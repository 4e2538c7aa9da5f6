"""FP8 GEMM + reduce-scatter: this rank's rows of ``reduce_scatter((A @ B) * sa * sb)``, fused.

Per rank: ``a`` ``[M, K/W]`` float8 e4m3 (this rank's K slice of the activations, row-major),
``b_shard`` ``[K/W, N]`` float8 e4m3 column-major (``w.t()`` of a row-major ``[N, K/W]``
weight shard), ``scale_a`` tensor-wise or ``[M, 1]``, ``scale_b`` tensor-wise or ``[1, N]``,
all fp32 and all **this rank's**: each rank quantised its own K slice. Rank ``r`` returns rows
``[r M/W, (r+1) M/W)`` of ``sum_q torch._scaled_mm(a_q, b_q, scale_a_q, scale_b_q)``.

Where the scales go: into each rank's partial, before the reduction. They cannot be applied
after it: the ranks' partials are sums over different K slices with different scales, so the
sum of the scaled partials is the only meaningful result (and what ``torch._scaled_mm`` per
rank then a reduce-scatter computes).

Why the partials are bf16 (not fp32): they are the local kernel's bf16 output, the same values
the unfused path (the same kernel, then NCCL ``reduce_scatter_tensor``) and torch async-TP's
``fused_scaled_matmul_reduce_scatter`` reduce, and the reduction then moves half the bytes of
fp32 partials. The reduction itself is the bf16 op's (:mod:`.gemm_rs`): the sm comm programs,
the ce host sum or the epilogue variant add the partials in fp32 and round once to bf16, so at
W = 2 fused and unfused agree bitwise and at W > 2 within NCCL's per-hop rounding. The
variant (``backend``/``reduce``), split and comm programs are chosen as for the bf16 op
(:func:`.gemm_rs.resolve_variant`, :func:`.gemm_rs.default_plan`) with the FP8 GEMM's time
(:func:`syncopate.ops._fp8.candidates`).
"""

from __future__ import annotations

import torch

from ..errors import LaunchError
from ..kernels.gemm_fp8 import fp8_kernel_fn
from ..kernels.gemm_fp8_config import fp8_short
from ..kernels.gemm_fp8_launch import resolve_fp8_config
from ..runtime import collectives as dist
from ..schedule.templates import reduce_scatter
from . import _fp8, choice, driver
from .gemm_rs import SHAPES, default_plan, epilogue_unavailable, resolve_variant
from .gemm_rs import SPEC as GEMM_RS
from .spec import Bench, OpSpec


def gemm_rs_fp8_fused_kernel(comm, M: int, N: int, *, backend="sm", split=1, order="swizzle",
                             mode=None, comm_programs=0, kernel="tma", config=None,
                             reduce="comm"):
    """The (cached) FusedKernel of the op; exposed for tests and the benchmark."""
    k = fp8_short(kernel)
    mode = driver.template_mode("rs", backend, mode)
    key = ("gemm_rs_fp8.fk", M, N, backend, split, order, mode, comm_programs, k, repr(config),
           reduce)
    return driver.cached_fused(
        comm, key, fp8_kernel_fn(k), lambda: reduce_scatter((M, N), "bf16", comm.world_size,
                                                            dim=0, order=order, mode=mode,
                                                            split=split),
        config=config, reduce=reduce, operand="c_ptr", backend=backend,
        comm_programs=driver.kernel_comm_programs(backend, comm_programs))


def _check_rows(M: int, W: int):
    if M % W:
        raise LaunchError(f"M = {M} is not a multiple of the world size {W}: every rank returns "
                          f"M/W rows; pad M to a multiple of {W}")


def gemm_rs_fp8_reference(a, b_shard, scale_a, scale_b, comm, *, kernel: str = "tma",
                          config=None, out=None):
    """The unfused path: the local FP8 kernel (scaled bf16 partial), then NCCL
    ``reduce_scatter_tensor``."""
    prob = _fp8.check_local(a, b_shard, scale_a, scale_b, comm, kernel)
    W = comm.world_size
    _check_rows(prob.M, W)
    cfg = resolve_fp8_config(kernel, prob.M, prob.N, prob.K, config)
    partial = torch.empty((prob.M, prob.N), device=a.device, dtype=torch.bfloat16)
    _fp8.launch_local(kernel, a, b_shard, partial, scale_a, scale_b, prob, cfg)
    if W == 1:  # one rank: the sum is its partial, no collective
        return partial if out is None else out.copy_(partial)
    if out is None:
        out = torch.empty((prob.M // W, prob.N), device=a.device, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM, group=comm.group)
    return out


def gemm_rs_fp8(a, b_shard, scale_a, scale_b, comm, *, backend: str | None = None, split=None,
                order: str = "swizzle", mode=None, comm_programs=None, kernel: str = "tma",
                config=None, out=None, fused=None, reduce: str | None = None):
    """This rank's ``[M/W, N]`` bf16 rows of the sum over ranks of the scaled partials (module
    docstring). Arguments as :func:`syncopate.ops.gemm_rs`; ``config`` an
    :class:`~syncopate.kernels.Fp8GemmConfig`. ``fused`` None: the op chooses between its
    fused variants and the unfused path, the same on every rank
    (:func:`syncopate.ops.choice.decide_shape`); ``fused=True`` or any of ``backend``/
    ``reduce``/``split``/``mode``/``comm_programs``: fused. World size 1: the local FP8
    kernel alone."""
    explicit = any(x is not None for x in (backend, reduce, split, mode, comm_programs))
    if not driver.use_fused(fused) or comm.world_size == 1:  # one rank: nothing to reduce
        return gemm_rs_fp8_reference(a, b_shard, scale_a, scale_b, comm, kernel=kernel,
                                     config=config, out=out)
    prob = _fp8.check_local(a, b_shard, scale_a, scale_b, comm, kernel)
    W, me = comm.world_size, comm.rank
    M, N, K = prob.M, prob.N, prob.K
    _check_rows(M, W)
    rows = M // W
    if out is not None and (tuple(out.shape) != (rows, N) or out.dtype != torch.bfloat16):
        raise LaunchError(f"out must be this rank's [M/W, N] = {(rows, N)} rows in "
                          f"torch.bfloat16, got {tuple(out.shape)} {out.dtype}")
    cfg = resolve_fp8_config(kernel, M, N, K, config)
    use, c = driver.choose(SPEC, comm, (M, N, K), _fp8.FP8, fused=fused, explicit=explicit,
                           named=backend is not None or reduce is not None,
                           unavailable=epilogue_unavailable(M, W, cfg, config is not None))
    if not use:
        return gemm_rs_fp8_reference(a, b_shard, scale_a, scale_b, comm, kernel=kernel,
                                     config=config, out=out)
    if c is not None:
        backend, reduce = c.backend, c.reduce
    backend, reduce, cfg = resolve_variant(M, N, K, W, _fp8.FP8, cfg, config is not None,
                                           backend, reduce)
    split, cp = default_plan(backend, reduce, M, N, K, W, _fp8.FP8, split, comm_programs)
    cp = driver.loopback_comm_programs(comm, cp, comm_programs)
    fk = gemm_rs_fp8_fused_kernel(comm, M, N, backend=backend, split=split, order=order,
                                  mode=mode, comm_programs=cp, kernel=kernel, config=cfg,
                                  reduce=reduce)
    # the partial C's symmetric buffer: its own, not the bf16 op's (the two ops' launches are
    # not ordered by each other's flags)
    C = driver.symmetric_buffer(comm, "gemm_rs_fp8.C", (M, N), torch.bfloat16)
    _fp8.launch_local(kernel, a, b_shard, C, scale_a, scale_b, prob, cfg,
                      programs=_fp8.programs(comm, kernel, backend, cp), fk=fk)
    if out is None:
        out = torch.empty((rows, N), device=a.device, dtype=torch.bfloat16)
    out.copy_(C[me * rows:(me + 1) * rows])
    return out


def _unfused(cal, s, W):
    """The bf16 partial C, reduce-scattered."""
    return choice.collective_s(cal, "reduce_scatter", s["m"] * s["n"] * 2, W)


SPEC = OpSpec(
    name="gemm_rs_fp8", fn=gemm_rs_fp8, shape=("m", "n", "k"),
    variants=("sm", "ce+epilogue", "ce"), dtype=_fp8.FP8,
    candidates=lambda spec, *args: _fp8.candidates(spec, GEMM_RS, _unfused, *args),
    explain=GEMM_RS.explain, bench_rows=("gemm_rs_fp8",),
    bench=Bench(("rs_fp8",), SHAPES, "rows:bench_rs_fp8"))

__all__ = ["SPEC", "gemm_rs_fp8", "gemm_rs_fp8_fused_kernel",
           "gemm_rs_fp8_reference"]
