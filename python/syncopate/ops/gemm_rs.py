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
path the calibrated cost model predicts fastest (:mod:`syncopate.ops.choice`).

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
    _gemm.check_k_sharded(a, b_shard)
    if a.shape[0] % comm.world_size:
        raise LaunchError(f"M = {a.shape[0]} is not a multiple of the world size {comm.world_size}: "
                          f"every rank returns M/W rows; pad M to a multiple of {comm.world_size}")
    _gemm.check_comm_device(comm, ("a", a), ("b_shard", b_shard))


def gemm_rs_reference(a, b_shard, comm, *, kernel: str = "tma", config=None, out=None):
    """The unfused path: the local kernel (or cuBLAS with ``kernel='cublas'``), then NCCL
    ``reduce_scatter_tensor``."""
    import torch
    from ..runtime import collectives as dist
    _check(a, b_shard, comm)
    M, N = a.shape[0], b_shard.shape[1]
    partial = torch.empty((M, N), device=a.device, dtype=a.dtype)
    _gemm.local_gemm(kernel, a, b_shard, partial, config)
    if out is None:
        out = torch.empty((M // comm.world_size, N), device=a.device, dtype=a.dtype)
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM, group=comm.group)
    return out


def gemm_rs_buffer(comm, M: int, N: int, dtype):
    """The symmetric ``[M, N]`` partial-C buffer of the fused path (allocated on first use)."""
    return _gemm.symmetric_buffer(comm, "gemm_rs.C", (M, N), dtype)


def gemm_rs_fused_kernel(comm, M: int, N: int, dtype, *, backend="sm", split=1, order="swizzle",
                         mode=None, comm_programs=0, kernel="tma", config=None, reduce="comm"):
    """The (cached) FusedKernel of the op; exposed for tests and the benchmark."""
    return _gemm.fused_kernel(comm, "rs", "reduce_scatter", (M, N), dtype, "c_ptr", backend=backend,
                              split=split, order=order, mode=mode, comm_programs=comm_programs,
                              kernel=kernel, config=config, reduce=reduce)


def epilogue_unavailable(M: int, W: int, cfg) -> tuple:
    """``(("ce+epilogue", reason),)`` when the epilogue variant cannot run this call's tile
    order (:func:`_check_epilogue_order`), else ``()``: what the decision must leave out. A
    pure function of the shape and the config, so every rank leaves out the same."""
    try:
        _check_epilogue_order("ce", M, W, cfg)
    except LaunchError as e:
        return (("ce+epilogue", str(e).split(":")[0]),)
    return ()


def resolve_variant(M: int, N: int, K: int, W: int, dtype, cfg, config_given: bool,
                    backend=None, reduce=None, *, gpu="device", decision=None):
    """``(backend, reduce, config)`` of a fused call (``K``: this rank's shard): the caller's
    choice (an explicit ``backend`` keeps ``reduce`` at ``"comm"`` unless ``reduce`` is given
    too), else the fused variant the calibrated cost model predicts fastest
    (:mod:`syncopate.ops.choice`: the epilogue variant where its tiles fit and its host time
    hides behind the GEMM; sm otherwise, and without a calibration). ``decision``: an
    already-made :class:`~syncopate.ops.choice.Decision` whose choice is fused; ``gpu``: the
    GPU type (default: the current CUDA device's). For the epilogue variant the default
    config's GROUP_M may be lowered for its tile order (:func:`_epilogue_groups`: bitwise the
    same tiles), while an explicit config (``config_given``) is the caller's and is checked
    as given.

    The choice never asks this driver whether it has stream memory operations (the decision
    must be the same on every rank): it reads the calibration's ``stream_wait``; a driver
    without them is refused at launch (``launchers.ce.check_epilogue_plan``) with what to do."""
    grouped = cfg if config_given else _epilogue_groups(cfg, M, W)
    if backend is not None or reduce is not None:
        backend, reduce = backend or ("ce" if reduce == "epilogue" else "sm"), reduce or "comm"
    else:
        if decision is None or decision.choice.path != "fused":
            from .choice import decide
            if gpu == "device":
                from ..calibration import device_gpu_type
                import torch
                gpu = (device_gpu_type(torch.device("cuda")) if torch.cuda.is_available()
                       else None)
            decision = decide("gemm_rs", M, N, K, W, _gemm.schedule_dtype(dtype), gpu,
                              cublas=False, fused=True,
                              unavailable=epilogue_unavailable(M, W, grouped))
        backend, reduce = decision.choice.backend, decision.choice.reduce
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
            mode=None, comm_programs=None, kernel: str | None = None, config=None, out=None,
            fused=None, reduce: str | None = None):
    """This rank's ``[M/W, N]`` rows of ``reduce_scatter(a @ b_shard, dim=0)`` (sum).

    The path, as :func:`syncopate.ops.ag_gemm`: left to the op, the calibrated cost model's
    fastest (``syncopate explain gemm_rs ...``) among the fused variants and the unfused path
    (our kernel or cuBLAS, then NCCL reduce-scatter), the same on every rank; ``fused=True``
    or any of ``backend``/``reduce``/``split``/``comm_programs``/``mode``: fused;
    ``fused=False`` -- or ``SYNCOPATE=0`` when ``fused`` is None -- unfused with our kernel.
    World size 1: the local GEMM alone, no fused machinery.
    ``reduce="epilogue"`` (``backend="ce"``): the copy engine moves each partial chunk into its
    owner's slot and the owner's GEMM tiles add them before their store
    (``passes/insert_epilogue_reduce.py``): no comm programs, no sum after the kernel; it needs
    stream memory operations (``cuStreamWaitValue32``) in the driver.
    ``reduce="comm"``: the comm programs (sm, nvshmem) or the host after the kernel (ce) add.
    """
    fused_args = (fused is True or backend is not None or reduce is not None
                  or split is not None or comm_programs is not None or mode is not None)
    _gemm.check_kernel(kernel, config, fused_args)
    use_fused = _gemm.use_fused(fused)
    if use_fused and comm.world_size > 1:
        key = _gemm.prepared_key("gemm_rs", comm, a, b_shard, out,
                                 (backend, split, order, mode, comm_programs, kernel,
                                  _gemm.config_key(config), reduce))
        prep = _gemm.get_prepared(comm, key)
        if prep is not None:
            return prep.run_copy_out(a, out)
    if comm.world_size == 1:
        return _gemm.world_size_one("gemm_rs", comm, a, b_shard, out, kernel, config,
                                     ours=not use_fused, check=lambda: _check(a, b_shard, comm))
    _check(a, b_shard, comm)
    W, me = comm.world_size, comm.rank
    M, K = a.shape
    N = b_shard.shape[1]
    tk = _gemm.triton_kernel(kernel)
    cfg = None if kernel == _gemm.CUBLAS else _gemm.resolve_config(tk, M, N, K, a.dtype, config)
    if not use_fused:
        return gemm_rs_reference(a, b_shard, comm, kernel=tk, config=cfg, out=out)
    if reduce not in (None, "comm", "epilogue"):
        raise LaunchError(f"reduce={reduce!r}; choose 'comm' or 'epilogue'")
    decision = None
    if backend is None and reduce is None:
        grouped = cfg if config is not None else _epilogue_groups(cfg, M, W)
        decision = _gemm.decide("gemm_rs", comm, M, N, K, a.dtype, kernel=kernel, config=config,
                                fused=True if fused_args else None,
                                unavailable=epilogue_unavailable(M, W, grouped))
        if decision.choice.path != "fused":
            local = decision.choice.local
            return gemm_rs_reference(a, b_shard, comm, kernel=local if local == _gemm.CUBLAS
                                     else tk, config=cfg, out=out)
    backend, reduce, cfg = resolve_variant(M, N, K, W, a.dtype, cfg, config is not None,
                                           backend, reduce, decision=decision)
    split, cp = default_plan(backend, reduce, M, N, K, W, a.dtype, split, comm_programs)
    cp = _gemm.loopback_comm_programs(comm, cp, comm_programs)
    if reduce == "epilogue":
        _check_epilogue_order(backend, M, W, cfg)
    fk = gemm_rs_fused_kernel(comm, M, N, a.dtype, backend=backend, split=split, order=order,
                              mode=mode, comm_programs=cp, kernel=tk, config=cfg, reduce=reduce)
    C = gemm_rs_buffer(comm, M, N, a.dtype)
    nprog = None
    if _gemm.short_kernel(tk) == "tma":
        nprog = _gemm.compute_programs(comm, _gemm.kernel_comm_programs(backend, cp))
    call = _gemm.gemm_call(tk, a, b_shard, C, cfg, num_programs=nprog)
    rows = M // W
    if out is not None and (tuple(out.shape) != (rows, N) or out.dtype != a.dtype):
        raise LaunchError(f"out must be this rank's [M/W, N] = {(rows, N)} rows in {a.dtype}, got "
                          f"{tuple(out.shape)} {out.dtype}")
    prep = _gemm.PreparedCall(fk=fk, grid=call.grid, args=list(call.args), out_shape=(rows, N),
                              a_index=call.fn.arg_names.index("a_ptr"),
                              result=C[me * rows:(me + 1) * rows])
    result = prep.run_copy_out(a, out)
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
