"""GEMM + reduce-scatter: this rank's rows of ``reduce_scatter(A @ B, dim=0)``, fused.

``A`` ``[M, K/W]`` (K sharded across ranks), ``B`` ``[K/W, N]``; every rank computes a partial
``C = A @ B`` ``[M, N]`` and rank ``r`` returns the sum over ranks of rows
``[r*M/W, (r+1)*M/W)``.

Fused plan: the local GEMM writes its partial C into a symmetric buffer; the
``reduce_scatter`` template (push, swizzle) says which row pieces go where; the compiler
inserts a PRODUCED signal after the last tile that writes each outgoing piece
(docs/fused-abi.md). With the ``ce`` backend the runtime then pushes each piece as soon as its
PRODUCED flag completes (``cuStreamWaitValue32`` on the side stream, no SM) into the owner's
per-source slot, and the owner sums its own rows and the slots after the kernel (fp32
accumulation, one rounding, sources in rank order) -- or, with ``reduce="epilogue"``, the
owner's GEMM tiles wait for those chunks and add them before their one store. With
``sm``/``nvshmem`` the comm programs do the same inside the kernel, and the owner's rows of the
symmetric buffer hold the result. Called without ``backend``/``reduce`` the op takes the
epilogue variant where it applies (:func:`default_variant`), else sm.

Unfused path (``fused=False`` or ``SYNCOPATE=0``): the same local kernel, then NCCL
``reduce_scatter_tensor``. For two ranks both paths add two bf16/fp16 partials in fp32 and
round once, so they agree bitwise; for more ranks NCCL's ring rounds after every hop and the
paths agree to rounding.
"""

from __future__ import annotations

import math

from .. import backends
from ..errors import LaunchError
from . import _gemm


#: default chunks per destination with ``reduce="epilogue"``. 2 x H200, runs 5-6 (sweep
#: 1/2/4/16): split 2 was the best or within 1% of it on every row where this variant is the
#: default; at M = 1024 x 4096 x 14336 split 1 was 3-5% faster (that shape defaults to sm).
EPILOGUE_SPLIT = 2


def _check(a, b_shard, comm):
    import torch
    for name, t in (("a", a), ("b_shard", b_shard)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise LaunchError(f"{name} must be a 2-D torch.Tensor")
    if a.dtype != b_shard.dtype:
        raise LaunchError(f"a is {a.dtype} but b_shard is {b_shard.dtype}: cast one of them")
    if a.shape[1] != b_shard.shape[0]:
        raise LaunchError(f"a is [M, K/W] = {tuple(a.shape)} and b_shard must be [K/W, N] but is "
                          f"{tuple(b_shard.shape)}: b_shard.shape[0] must be {a.shape[1]}")
    if a.shape[0] % comm.world_size:
        raise LaunchError(f"M = {a.shape[0]} is not a multiple of the world size {comm.world_size}: "
                          f"every rank returns M/W rows; pad M to a multiple of {comm.world_size}")
    _gemm.check_comm_device(comm, ("a", a), ("b_shard", b_shard))


def gemm_rs_reference(a, b_shard, comm, *, kernel: str = "tma", config=None, out=None):
    """The unfused path: the local kernel, then NCCL ``reduce_scatter_tensor``."""
    import torch
    from ..runtime import collectives as dist
    _check(a, b_shard, comm)
    M, N = a.shape[0], b_shard.shape[1]
    partial = torch.empty((M, N), device=a.device, dtype=a.dtype)
    _gemm.run_local(_gemm.gemm_call(kernel, a, b_shard, partial, config))
    if out is None:
        out = torch.empty((M // comm.world_size, N), device=a.device, dtype=a.dtype)
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM, group=comm.group)
    return out


def gemm_rs_buffer(comm, M: int, N: int, dtype):
    """The symmetric ``[M, N]`` partial-C buffer of the fused path (allocated on first use)."""
    import torch
    key = ("gemm_rs.C", int(M), int(N), torch.empty((), dtype=dtype).dtype)
    buf = comm.cache.get(key)
    if buf is None:
        buf = comm.empty((int(M), int(N)), dtype)
        comm.cache[key] = buf
    return buf


def gemm_rs_fused_kernel(comm, M: int, N: int, dtype, *, backend="sm", split=1, order="swizzle",
                         mode=None, comm_programs=0, kernel="tma", config=None, reduce="comm"):
    """The (cached) FusedKernel of the op; exposed for tests and the benchmark."""
    return _gemm.fused_kernel(comm, "rs", "reduce_scatter", (M, N), dtype, "c_ptr", backend=backend,
                              split=split, order=order, mode=mode, comm_programs=comm_programs,
                              kernel=kernel, config=config, reduce=reduce)


#: the epilogue variant is the default only for GEMMs of at least this many seconds (the cost
#: model's estimate of this rank's GEMM): its host side (side-stream handshake, copy-engine
#: copies, stream waits) costs ~0.28 ms per call against ~0.06 ms for sm (run 6,
#: host_profile.log), so below ~0.2 ms of GEMM a loop of calls would wait for the host and
#: sm's shorter launch wins although its kernel is slower (M = 1024, 4096 x 14336: sm 0.20 ms
#: device / 0.06 host, epilogue 0.15 device / 0.28 host).
EPILOGUE_MIN_GEMM_S = 0.2e-3


def default_variant(M: int, W: int, cfg, backend=None, reduce=None,
                    gemm_s: float | None = None) -> tuple[str, str]:
    """``(backend, reduce)`` when the caller leaves them out: ``("ce", "epilogue")`` where it
    applies, else ``("sm", "comm")``. ``gemm_s``: the estimated GEMM time of this rank.

    Why the epilogue variant is the default: on 2 x H200 (bench/results/2026-11-30-h200x2-run6)
    it was the fastest fused GEMM+RS on every shape measured -- 1.06-1.16x of ideal at M = 8192
    and 4096 where the sm comm programs were 1.12-1.35x (they take 8-16 SMs from the GEMM and
    leave the last band's sum as a tail). It needs stream memory operations
    (``cuStreamWaitValue32``), a tile walk in which the sent rows fill whole GROUP_M groups
    (:func:`_check_epilogue_order`) and a GEMM long enough to hide its host time
    (:data:`EPILOGUE_MIN_GEMM_S`); where any is missing the op takes the sm comm programs
    rather than refusing. An explicit ``backend`` keeps ``reduce`` at ``"comm"`` unless
    ``reduce`` is given too."""
    if backend is not None or reduce is not None:
        return backend or ("ce" if reduce == "epilogue" else "sm"), reduce or "comm"
    if gemm_s is not None and gemm_s < EPILOGUE_MIN_GEMM_S:
        return "sm", "comm"
    from ..runtime import _cuda
    if not _cuda.stream_wait_available():
        return "sm", "comm"
    try:
        _check_epilogue_order("ce", M, W, cfg)
    except LaunchError:
        return "sm", "comm"
    return "ce", "epilogue"


def resolve_variant(M: int, N: int, K: int, W: int, dtype, cfg, config_given: bool,
                    backend=None, reduce=None):
    """``(backend, reduce, config)`` of a call (``K``: this rank's shard): the caller's choice
    or :func:`default_variant`; for the epilogue variant the default config's GROUP_M may be
    lowered for its tile order (:func:`_epilogue_groups`: bitwise the same tiles), while an
    explicit config (``config_given``) is the caller's and is checked as given."""
    grouped = cfg if config_given else _epilogue_groups(cfg, M, W)
    backend, reduce = default_variant(M, W, grouped, backend, reduce,
                                      _gemm.gemm_seconds(M, N, K, dtype))
    return backend, reduce, grouped if reduce == "epilogue" else cfg


def default_plan(backend: str, reduce: str, M: int, N: int, K: int, W: int, dtype, split=None,
                 comm_programs=None) -> tuple[int, int]:
    """``(split, comm_programs)`` the op uses: the caller's, else :data:`EPILOGUE_SPLIT` for the
    epilogue variant (no tail to shorten: the chunks only have to reach the owner before its
    own rows come up, and a few per destination keep each copy large and its start early),
    else the cost model's (:func:`syncopate.ops._gemm.choose`; ``K`` is this rank's shard)."""
    if reduce == "epilogue" and split is None:
        split = EPILOGUE_SPLIT
    return _gemm.choose("gemm_rs", backend, M, N, K, W, dtype, split, comm_programs)


def gemm_rs(a, b_shard, comm, *, backend: str | None = None, split=None, order: str = "swizzle",
            mode=None, comm_programs=None, kernel: str = "tma", config=None, out=None, fused=None,
            reduce: str | None = None):
    """This rank's ``[M/W, N]`` rows of ``reduce_scatter(a @ b_shard, dim=0)`` (sum).

    Arguments as :func:`syncopate.ops.ag_gemm`. ``fused=False`` -- or ``SYNCOPATE=0`` when
    ``fused`` is None -- takes the unfused path (local kernel + NCCL reduce-scatter).
    ``reduce="epilogue"`` (``backend="ce"``): the copy engine moves each partial chunk into its
    owner's slot and the owner's GEMM tiles add them before their store
    (``passes/insert_epilogue_reduce.py``): no comm programs, no sum after the kernel.
    ``reduce="comm"``: the comm programs (sm, nvshmem) or the host after the kernel (ce) add.
    Leaving both ``backend`` and ``reduce`` out picks :func:`default_variant` (the epilogue
    variant where it applies, else sm).
    """
    from ..runtime.fused import fused_enabled
    use_fused = fused_enabled() if fused is None else bool(fused)
    if use_fused:
        key = _gemm.prepared_key("gemm_rs", comm, a, b_shard, out,
                                 (backend, split, order, mode, comm_programs, kernel, repr(config),
                                  reduce))
        prep = _gemm.get_prepared(comm, key)
        if prep is not None:
            return _run_prepared(prep, a, out)
    _check(a, b_shard, comm)
    W, me = comm.world_size, comm.rank
    M, K = a.shape
    N = b_shard.shape[1]
    cfg = _gemm.resolve_config(kernel, M, N, K, a.dtype, config)
    if not use_fused:
        return gemm_rs_reference(a, b_shard, comm, kernel=kernel, config=cfg, out=out)
    if reduce not in (None, "comm", "epilogue"):
        raise LaunchError(f"reduce={reduce!r}; choose 'comm' or 'epilogue'")
    backend, reduce, cfg = resolve_variant(M, N, K, W, a.dtype, cfg, config is not None,
                                           backend, reduce)
    split, cp = default_plan(backend, reduce, M, N, K, W, a.dtype, split, comm_programs)
    cp = _gemm.loopback_comm_programs(comm, cp, comm_programs)
    if reduce == "epilogue":
        _check_epilogue_order(backend, M, W, cfg)
    fk = gemm_rs_fused_kernel(comm, M, N, a.dtype, backend=backend, split=split, order=order,
                              mode=mode, comm_programs=cp, kernel=kernel, config=cfg, reduce=reduce)
    C = gemm_rs_buffer(comm, M, N, a.dtype)
    nprog = None
    if _gemm.short_kernel(kernel) == "tma":
        nprog = _gemm.compute_programs(comm, _gemm.kernel_comm_programs(backend, cp))
    call = _gemm.gemm_call(kernel, a, b_shard, C, cfg, num_programs=nprog)
    rows = M // W
    if out is not None and (tuple(out.shape) != (rows, N) or out.dtype != a.dtype):
        raise LaunchError(f"out must be this rank's [M/W, N] = {(rows, N)} rows in {a.dtype}, got "
                          f"{tuple(out.shape)} {out.dtype}")
    prep = _gemm.PreparedCall(fk=fk, grid=call.grid, args=list(call.args), out_shape=(rows, N),
                              a_index=call.fn.arg_names.index("a_ptr"),
                              result=C[me * rows:(me + 1) * rows])
    result = _run_prepared(prep, a, out)
    _gemm.put_prepared(comm, key, prep)  # after the first launch (it allocates the flags)
    return result


def _check_epilogue_order(backend, M: int, W: int, cfg) -> None:
    """The epilogue reduction is deadlock-free when every program computes all the rows it sends
    before any row it owns (its own rows wait for the other ranks' partials). The compiler puts
    the sent M-tiles first; the kernels walk tiles in groups of ``GROUP_M`` M-tiles, so the
    sent tiles must fill whole groups, and no tile may hold rows of two owners."""
    if "epilogue" not in backends.get(backend, LaunchError).reduce_modes:
        able = [n for n in backends.names() if "epilogue" in backends.get(n).reduce_modes]
        raise LaunchError(f"reduce='epilogue' needs backend={' or '.join(map(repr, able))}, "
                          f"whose launcher moves the partials into the owner's slots")
    bm, gm = int(cfg.BLOCK_M), int(cfg.GROUP_M)
    rows = M // W
    if rows % bm or ((W - 1) * (rows // bm)) % gm:
        raise LaunchError(f"reduce='epilogue' needs M/W = {rows} to be a multiple of BLOCK_M = {bm} "
                          f"and the {W - 1} other ranks' tiles to fill whole groups of GROUP_M = {gm} "
                          f"(here {(W - 1) * (rows // bm) if rows % bm == 0 else 'ragged'} tiles): "
                          f"use M a multiple of {W * bm * gm // math.gcd(W - 1, gm)}, another config, "
                          f"or reduce='comm'")


def _epilogue_groups(cfg, M: int, W: int):
    """The default config with ``GROUP_M`` lowered (powers of two) until the sent tiles fill
    whole groups, e.g. 4 at M = 1024 on two ranks: the grouping only orders tiles for L2 reuse,
    a tile's arithmetic is the same, so results stay bitwise those of the default config."""
    import dataclasses
    bm, gm = int(cfg.BLOCK_M), int(cfg.GROUP_M)
    rows = M // W
    if rows % bm:
        return cfg  # refused by _check_epilogue_order with the reason
    sent = (W - 1) * (rows // bm)
    while gm > 1 and sent % gm:
        gm //= 2
    return cfg if gm == cfg.GROUP_M else dataclasses.replace(cfg, GROUP_M=gm)


def _run_prepared(prep, a, out):
    """Launch with this call's ``a``, then copy this rank's reduced rows out of the symmetric
    buffer (the next launch overwrites it; the copy is stream-ordered)."""
    import torch
    args = prep.args.copy()
    args[prep.a_index] = a
    prep.fk[prep.grid](*args)
    if out is None:
        out = torch.empty(prep.out_shape, device=a.device, dtype=a.dtype)
    out.copy_(prep.result)
    return out
