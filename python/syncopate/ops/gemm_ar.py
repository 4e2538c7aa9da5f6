"""GEMM + all-reduce: ``all_reduce(A @ B)`` on every rank, fused (row-parallel layers;
docs/gemm_ar.md: the contract, what is fused, the backends, the plan).

``A`` ``[M, K/W]`` and ``B`` ``[K/W, N]`` (K sharded across ranks, as after a column-parallel
layer); every rank computes a partial ``C = A @ B`` ``[M, N]`` and every rank returns the
whole sum over ranks. Fused from parts: the local GEMM writes its partial C into a symmetric
buffer, and the ``all_reduce`` schedule template (reduce-scatter then all-gather of the same
tensor, push) has the comm programs add each row piece into its owner as soon as both partials
exist and push each reduced piece to every other rank once its sums are complete.

Bitwise-identical results on every rank: every element is summed once, by the rank owning its
rows, in a fixed order, and copied to the others. Why no ``backend="ce"`` (nor the
``reduce="epilogue"`` variant): the copy engine's side stream would have to wait for a peer's
flag before forwarding a reduced piece, which it refuses. Why no one-shot all-reduce: its sum
order would differ per rank (:mod:`.gemm_ar_plan`).

Unfused path (``fused=False``, ``SYNCOPATE=0`` or the op's choice): the same local kernel (or
cuBLAS where the op chose it), then NCCL ``all_reduce``; for two ranks it agrees bitwise with
the fused path, for more to rounding. The generic driver
(:func:`syncopate.ops.driver.gemm_op`) runs the call from this op's :data:`SPEC`.
"""

from __future__ import annotations

import torch

from ..dtypes import canonical
from ..errors import LaunchError
from ..runtime import collectives as dist
from . import driver, gemm_ar_plan
from .spec import Bench, GemmLaunch, OpSpec

BACKENDS = ("sm", "nvshmem")


def _check(a, b_shard, comm, out=None):
    driver.check_k_sharded(a, b_shard)
    if a.shape[0] < 1 or b_shard.shape[1] < 1:
        raise LaunchError(f"a @ b_shard is [{a.shape[0]}, {b_shard.shape[1]}]: M and N must be "
                          f">= 1")
    driver.check_comm_device(comm, ("a", a), ("b_shard", b_shard))
    M, N = a.shape[0], b_shard.shape[1]
    if out is not None and (tuple(out.shape) != (M, N) or out.dtype != a.dtype):
        raise LaunchError(f"out must be the whole [M, N] = {(M, N)} result in {a.dtype}, got "
                          f"{tuple(out.shape)} {out.dtype}")


def _check_backend(backend: str) -> None:
    if backend == "ce":
        raise LaunchError("gemm_ar cannot use backend='ce': the all-gather half forwards pieces "
                          "once their sums are complete, and the copy engine's side stream "
                          "would have to wait for a peer's flag mid-stream (refused: it could "
                          "starve behind the fused kernel's SMs). Use backend='sm' (or "
                          "'nvshmem' with Communicator(symm_backend='nvshmem'))")
    if backend not in BACKENDS:
        raise LaunchError(f"backend={backend!r}; gemm_ar runs with "
                          f"{' or '.join(map(repr, BACKENDS))}")


def gemm_ar_reference(a, b_shard, comm, *, kernel: str = "tma", config=None, out=None):
    """The unfused path: the local kernel (``kernel='cublas'``: ``torch.matmul``), then NCCL
    ``all_reduce`` (sum) in place."""
    _check(a, b_shard, comm, out)
    if out is None:
        out = torch.empty((a.shape[0], b_shard.shape[1]), device=a.device, dtype=a.dtype)
    driver.local_gemm(kernel, a, b_shard, out, config)
    if comm.world_size > 1:  # one rank: the identity (and no collective to capture)
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=comm.group)
    return out


def gemm_ar_buffer(comm, M: int, N: int, dtype):
    """The symmetric ``[M, N]`` C buffer of the fused path (allocated on first use, a
    collective): partials, then the reduced result on every rank."""
    return driver.symmetric_buffer(comm, SPEC.gemm.buffer, (M, N), dtype)


def gemm_ar_fused_kernel(comm, M: int, N: int, dtype, *, backend="sm", split=1, order="swizzle",
                         mode="push", comm_programs=8, kernel="tma", config=None):
    """The (cached) FusedKernel of the op; exposed for tests and the benchmark."""
    _check_backend(backend)
    return driver.fused_kernel(comm, SPEC, (M, N), 0, dtype, backend=backend, split=split,
                               order=order, mode=mode, comm_programs=comm_programs,
                               kernel=kernel, config=config)


def default_plan(backend: str, M: int, N: int, K: int, W: int, dtype, order=None, split=None,
                 comm_programs=None, block_m: int | None = None) -> tuple[str, int, int]:
    """``(order, split, comm_programs)`` the op uses: the caller's, else the cost model's
    (:func:`syncopate.ops.gemm_ar_plan.choose_plan`; ``K`` is this rank's shard, ``block_m``
    the GEMM config's tile height; ``choose_plan`` refuses an unknown ``order``)."""
    if order in gemm_ar_plan.ORDERS and split is not None and comm_programs is not None:
        return order, int(split), int(comm_programs)
    p = gemm_ar_plan.choose_plan(M, N, K, W, canonical(dtype), backend, order,
                                 split, comm_programs, block_m=block_m)
    return p.order, p.split, p.comm_programs


def gemm_ar(a, b_shard, comm, *, backend: str | None = None, split=None,
            order: str | None = None, mode: str | None = None, comm_programs=None,
            kernel: str | None = None, config=None, out=None, fused=None):
    """``all_reduce(a @ b_shard)`` -> ``[M, N]`` on every rank, bitwise the same everywhere.

    ``a`` ``[M, K/W]``, ``b_shard`` ``[K/W, N]``; any ``M >= 1`` (ranks whose share of the
    rows is empty own nothing). ``backend``: ``'sm'`` or ``'nvshmem'`` (``'ce'`` is refused,
    see the module docstring). ``order`` (``'swizzle'``/``'ring'``), ``split`` and
    ``comm_programs`` come from the cost model unless given (:mod:`.gemm_ar_plan`); ``mode``
    defaults to ``'push'`` (the owner knows when its sum is complete). ``kernel``/``config``
    select the local GEMM (``kernel='cublas'``: the unfused path with ``torch.matmul``).
    ``fused`` None: the op chooses the fused plan (``sm``) or the unfused path, the same on
    every rank (:func:`syncopate.ops.choice.decide_shape`); ``fused=True`` or any of
    ``backend``/``split``/``order``/``mode``/``comm_programs``: fused. ``fused=False`` -- or
    ``SYNCOPATE=0`` when ``fused`` is None -- the unfused path with our kernel (local kernel +
    NCCL all-reduce). At world size 1: the local GEMM alone (ours or cuBLAS,
    :func:`syncopate.ops.driver.world_size_one`). Result contract as :func:`syncopate.ops.ag_gemm`:
    our kernel's bits unless the op chose cuBLAS (pin ``kernel='tma'`` for ours).
    """
    return driver.gemm_op(SPEC, a, b_shard, comm, out, fused, kernel, config,
                          (backend, split, order, mode, comm_programs, None))


def _plan(backend, reduce, s, W, dtype, order, split, comm_programs, cfg):
    return default_plan(backend, s["m"], s["n"], s["k"], W, dtype, order, split, comm_programs,
                        block_m=None if cfg is None else int(cfg.BLOCK_M))


def _variant(backend, reduce, M, W, cfg, config_given):
    _check_backend(backend)
    return cfg


def explain_shape(op, dims, W, batch=1, causal=False):
    """The per-rank GEMM of the global ``M x N x K`` (A ``[M, K]`` split along K, the whole
    ``[M, N]`` on every rank)."""
    M, N, K = dims
    if W > 1 and K % W:
        raise LaunchError(f"{op} shards K over the {W} ranks: K = {K} must be a multiple of {W}")
    return (M, N, K // W) if W > 1 else (M, N, K)


SPEC = OpSpec(
    name="gemm_ar", fn=gemm_ar, shape=("m", "n", "k"), variants=("sm",),
    locals=("triton", "cublas"), explain=explain_shape, bench_rows=("gemm_ar",),
    # LLaMA-70B's down-projection (K split over the ranks) at decode / small prefill and 8192
    bench=Bench(("ar", "gemm_ar"), ((8192, 28672),), "rows:bench_ar",
                ms=((1, 16, 64, 128, 256, 512, 8192), (16, 8192))),
    gemm=GemmLaunch(
        template="all_reduce", operand="c_ptr", buffer="gemm_ar.C", kind=None, staged=False,
        explicit=("backend", "split", "order", "mode", "comm_programs"), check=_check,
        dims=lambda a, b_shard, W: (a.shape[0], b_shard.shape[1], a.shape[1]),
        schedule_shape=lambda s, W: ((s["m"], s["n"]), 0), reference=gemm_ar_reference,
        plan=_plan, variant=_variant, whole=True))

__all__ = ["BACKENDS", "SPEC", "default_plan", "gemm_ar", "gemm_ar_buffer",
           "gemm_ar_fused_kernel", "gemm_ar_reference"]
