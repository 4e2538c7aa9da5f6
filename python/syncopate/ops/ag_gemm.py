"""All-gather + GEMM: ``C = all_gather(A, dim=0) @ B``, fused.

``A`` is sharded on M across the ranks (``a_shard`` ``[M/W, K]`` on every rank), ``B`` is
local (``[K, N_local]``, e.g. a column shard of a weight in tensor parallelism). Built from
parts, no hand-written fused kernel: the local GEMM of :mod:`syncopate.kernels`, the
``all_gather`` schedule template and :func:`syncopate.fuse`.

State kept per communicator (``comm.cache``), per shape/dtype: the symmetric ``A`` buffer
``[M, K]`` (each rank copies its shard into its own rows, or writes there directly: pass
``ag_gemm_buffer(...)`` rows as ``a_shard`` and the copy is skipped) and one FusedKernel per
(backend, split, order, mode, comm programs, kernel, config). The FusedKernel defers its
CONSUMED wait to :meth:`before_staging`, called right before the shard is copied in.
"""

from __future__ import annotations

from ..errors import LaunchError
from . import _gemm


def _check(a_shard, b, comm):
    import torch
    for name, t in (("a_shard", a_shard), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise LaunchError(f"{name} must be a 2-D torch.Tensor")
    if a_shard.dtype != b.dtype:
        raise LaunchError(f"a_shard is {a_shard.dtype} but b is {b.dtype}: cast one of them")
    if a_shard.shape[1] != b.shape[0]:
        raise LaunchError(f"a_shard is [M/W, K] = {tuple(a_shard.shape)} and b must be [K, N] but "
                          f"is {tuple(b.shape)}: b.shape[0] must be {a_shard.shape[1]}")
    _gemm.check_comm_device(comm, ("a_shard", a_shard), ("b", b))


def ag_gemm_buffer(comm, m_shard: int, K: int, dtype):
    """The symmetric ``[M, K]`` A buffer the op uses for this shape (allocated on first use, a
    collective). Writing this rank's rows (``buf[rank*m_shard:(rank+1)*m_shard]``) and passing
    them as ``a_shard`` skips the staging copy."""
    return _gemm.symmetric_buffer(comm, "ag_gemm.A", (int(m_shard) * comm.world_size, K), dtype)


def ag_gemm_reference(a_shard, b, comm, *, kernel: str = "tma", config=None, out=None):
    """The unfused path: NCCL ``all_gather_into_tensor`` then the same local kernel (or cuBLAS
    with ``kernel='cublas'``)."""
    import torch

    from ..runtime import collectives as dist
    _check(a_shard, b, comm)
    W = comm.world_size
    Ms, K = a_shard.shape
    gathered = torch.empty((Ms * W, K), device=a_shard.device, dtype=a_shard.dtype)
    dist.all_gather_into_tensor(gathered, a_shard.contiguous(), group=comm.group)
    if out is None:
        out = torch.empty((Ms * W, b.shape[1]), device=b.device, dtype=b.dtype)
    _gemm.local_gemm(kernel, gathered, b, out, config)
    return out


def ag_gemm_fused_kernel(comm, M: int, K: int, dtype, *, backend="sm", split=1, order="swizzle",
                         mode=None, comm_programs=0, kernel="tma", config=None):
    """The (cached) FusedKernel the op launches; exposed for tests and the benchmark."""
    return _gemm.fused_kernel(comm, "ag", "all_gather", (M, K), dtype, "a_ptr", backend=backend,
                              split=split, order=order, mode=mode, comm_programs=comm_programs,
                              kernel=kernel, config=config, defer_consumed_wait=True)


def ag_gemm(a_shard, b, comm, *, backend: str | None = None, split=None, order: str = "swizzle",
            mode=None, comm_programs=None, kernel: str | None = None, config=None, out=None,
            fused=None):
    """``all_gather(a_shard, dim=0) @ b`` -> ``[M, N_local]`` with ``M = W * a_shard.shape[0]``.

    The path: left to the op (the default), it takes whichever the calibrated cost model
    (:mod:`syncopate.ops.choice`, ``syncopate explain ag_gemm ...``) predicts fastest for this
    shape, dtype, world size and GPU type -- a fused variant or the unfused path (NCCL
    all-gather + our local kernel or cuBLAS) -- the same on every rank. ``fused=True`` or any
    of ``backend``/``split``/``comm_programs``/``mode``: fused (the cost model picks what is
    not given). ``fused=False`` -- or ``SYNCOPATE=0`` when ``fused`` is None -- the unfused
    path with our kernel. At world size 1 there is nothing to gather: the local GEMM alone
    (ours or cuBLAS, as for the unfused path), no fused machinery, whatever the fused arguments
    (:func:`syncopate.ops._gemm.world_size_one`).

    ``backend``: ``'sm'`` (comm programs in the kernel), ``'ce'`` (copy engine on a side
    stream) or ``'nvshmem'`` (needs ``Communicator(symm_backend='nvshmem')``). ``kernel`` and
    ``config`` select our local GEMM (:mod:`syncopate.kernels`); ``kernel='cublas'`` the
    unfused path with ``torch.matmul``. Result contract: with our kernel the fused and the
    unfused path give bitwise the local kernel's result on the gathered A; when the op chose
    cuBLAS (``kernel`` and ``config`` left out) the result is cuBLAS's (same math, fp32
    accumulation, other rounding) -- pin ``kernel='tma'`` for our kernel's bits.
    """
    import torch

    fused_args = (fused is True or backend is not None or split is not None
                  or comm_programs is not None or mode is not None)
    _gemm.check_kernel(kernel, config, fused_args)
    use_fused = _gemm.use_fused(fused)
    if use_fused and comm.world_size > 1:
        key = _gemm.prepared_key("ag_gemm", comm, a_shard, b, out,
                                 (backend, split, order, mode, comm_programs, kernel,
                                  _gemm.config_key(config)))
        prep = _gemm.get_prepared(comm, key)
        if prep is not None:
            return prep.run_staged(a_shard, out)
    if comm.world_size == 1:
        return _gemm.world_size_one("ag_gemm", comm, a_shard, b, out, kernel, config,
                                     ours=not use_fused, check=lambda: _check(a_shard, b, comm))
    _check(a_shard, b, comm)
    W, me = comm.world_size, comm.rank
    Ms, K = a_shard.shape
    M, N = Ms * W, b.shape[1]
    tk = _gemm.triton_kernel(kernel)
    cfg = None if kernel == _gemm.CUBLAS else _gemm.resolve_config(tk, M, N, K, a_shard.dtype,
                                                                   config)
    if not use_fused:
        return ag_gemm_reference(a_shard, b, comm, kernel=tk, config=cfg, out=out)
    if backend is None:
        choice = _gemm.decide("ag_gemm", comm, M, N, K, a_shard.dtype, kernel=kernel,
                              config=config, fused=True if fused_args else None).choice
        if choice.path != "fused":
            return ag_gemm_reference(a_shard, b, comm, kernel=choice.local if choice.local ==
                                     _gemm.CUBLAS else tk, config=cfg, out=out)
        backend = choice.backend
    if out is None:
        out = torch.empty((M, N), device=b.device, dtype=b.dtype)
    split, cp = _gemm.choose("ag_gemm", backend, M, N, K, W, a_shard.dtype, split, comm_programs)
    cp = _gemm.loopback_comm_programs(comm, cp, comm_programs)
    fk = ag_gemm_fused_kernel(comm, M, K, a_shard.dtype, backend=backend, split=split, order=order,
                              mode=mode, comm_programs=cp, kernel=tk, config=cfg)
    A = ag_gemm_buffer(comm, Ms, K, a_shard.dtype)
    slot = A[me * Ms:(me + 1) * Ms]
    nprog = None
    if _gemm.short_kernel(tk) == "tma":
        # the comm programs take SMs of their own: the persistent GEMM gets the rest
        nprog = _gemm.compute_programs(comm, _gemm.kernel_comm_programs(backend, cp))
    call = _gemm.gemm_call(tk, A, b, out, cfg, num_programs=nprog)
    prep = _gemm.PreparedCall(fk=fk, grid=call.grid, args=list(call.args), out_shape=(M, N),
                              out_index=call.fn.arg_names.index("c_ptr"), slot=slot)
    result = prep.run_staged(a_shard, out)
    _gemm.put_prepared(comm, key, prep)  # after the first launch (it allocates the flags)
    return result
