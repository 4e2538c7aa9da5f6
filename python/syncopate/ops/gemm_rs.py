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
path the calibrated cost model predicts fastest (:mod:`syncopate.ops.choice`); the generic
driver (:func:`syncopate.ops.driver.gemm_op`) runs the call from this op's :data:`SPEC`.

Unfused path (``fused=False`` or ``SYNCOPATE=0``): the same local kernel, then NCCL
``reduce_scatter_tensor``. For two ranks both paths add two bf16/fp16 partials in fp32 and
round once, so they agree bitwise; for more ranks NCCL's ring rounds after every hop and the
paths agree to rounding.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .. import backends, calibration
from ..dtypes import canonical
from ..errors import LaunchError, TorchOpError
from ..runtime import collectives as dist
from . import choice, driver
from .spec import Bench, FxPattern, GemmLaunch, OpSpec, TorchOp

#: default chunks per destination with ``reduce="epilogue"``. 2 x H200, runs 5-6 (sweep
#: 1/2/4/16): split 2 was the best or within 1% of it on every row where this variant is the
#: default; at M = 1024 x 4096 x 14336 split 1 was 3-5% faster (that shape defaults to sm).
EPILOGUE_SPLIT = 2
#: the benchmark's shapes, global ``(N, K)``: A per rank ``[M, K/W]``
SHAPES = ((4096, 14336), (8192, 28672))


def _check(a, b_shard, comm, out=None):
    driver.check_k_sharded(a, b_shard)
    if a.shape[0] % comm.world_size:
        raise LaunchError(f"M = {a.shape[0]} is not a multiple of the world size {comm.world_size}: "
                          f"every rank returns M/W rows; pad M to a multiple of {comm.world_size}")
    driver.check_comm_device(comm, ("a", a), ("b_shard", b_shard))


def gemm_rs_reference(a, b_shard, comm, *, kernel: str = "tma", config=None, out=None):
    """The unfused path: the local kernel (or cuBLAS with ``kernel='cublas'``), then NCCL
    ``reduce_scatter_tensor``."""
    _check(a, b_shard, comm)
    M, N = a.shape[0], b_shard.shape[1]
    partial = torch.empty((M, N), device=a.device, dtype=a.dtype)
    driver.local_gemm(kernel, a, b_shard, partial, config)
    if out is None:
        out = torch.empty((M // comm.world_size, N), device=a.device, dtype=a.dtype)
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM, group=comm.group)
    return out


def gemm_rs_buffer(comm, M: int, N: int, dtype):
    """The symmetric ``[M, N]`` partial-C buffer of the fused path (allocated on first use)."""
    return driver.symmetric_buffer(comm, SPEC.gemm.buffer, (M, N), dtype)


def gemm_rs_fused_kernel(comm, M: int, N: int, dtype, *, backend="sm", split=1, order="swizzle",
                         mode=None, comm_programs=0, kernel="tma", config=None, reduce="comm"):
    """The (cached) FusedKernel of the op; exposed for tests and the benchmark."""
    return driver.fused_kernel(comm, SPEC, (M, N), 0, dtype, backend=backend, split=split,
                               order=order, mode=mode, comm_programs=comm_programs,
                               kernel=kernel, config=config, reduce=reduce)


def epilogue_unavailable(M: int, W: int, cfg, config_given: bool = True) -> tuple:
    """``(("ce+epilogue", reason),)`` when the epilogue variant cannot run this call's tile
    order (:func:`_check_epilogue_order`; the default config -- not ``config_given`` -- with
    its GROUP_M lowered as the variant would run it), else ``()``: what the decision must
    leave out. A pure function of the shape and the config, so every rank leaves out the
    same."""
    try:
        _check_epilogue_order("ce", M, W, cfg if config_given else _epilogue_groups(cfg, M, W))
    except LaunchError as e:
        return (("ce+epilogue", str(e).split(":")[0]),)
    return ()


def _variant(backend, reduce, M, W, cfg, config_given):
    """The chosen variant's checks; its config: for the epilogue variant the default config's
    GROUP_M may be lowered for its tile order (:func:`_epilogue_groups`: bitwise the same
    tiles), while an explicit config (``config_given``) is the caller's and is checked as
    given. The choice never asks this driver whether it has stream memory operations (the
    decision must be the same on every rank): it reads the calibration's ``stream_wait``; a
    driver without them is refused at launch (``runtime.launchers.ce.check_epilogue_plan``)."""
    if reduce not in ("comm", "epilogue"):
        raise LaunchError(f"reduce={reduce!r}; choose 'comm' or 'epilogue'")
    if reduce != "epilogue":
        return cfg
    cfg = cfg if config_given else _epilogue_groups(cfg, M, W)
    _check_epilogue_order(backend, M, W, cfg)
    return cfg


def resolve_variant(M: int, N: int, K: int, W: int, dtype, cfg, config_given: bool,
                    backend=None, reduce=None, *, gpu="device"):
    """``(backend, reduce, config)`` a fused call of this shape runs (``K``: this rank's
    shard): the caller's variant (an explicit ``backend`` keeps ``reduce`` at ``"comm"``
    unless ``reduce`` is given too), else the fused variant the calibrated cost model predicts
    fastest on ``gpu`` (default: the current CUDA device's type); the config as
    :func:`_variant` gives it."""
    if backend is None and reduce is None:
        if gpu == "device":
            gpu = (calibration.device_gpu_type(torch.device("cuda")) if torch.cuda.is_available()
                   else None)
        c = choice.decide(SPEC.name, M, N, K, W, canonical(dtype), gpu, cublas=False,
                          fused=True, unavailable=epilogue_unavailable(M, W, cfg, config_given)
                          ).choice
        backend, reduce = c.backend, c.reduce
    backend, reduce = backend or ("ce" if reduce == "epilogue" else "sm"), reduce or "comm"
    return backend, reduce, _variant(backend, reduce, M, W, cfg, config_given)


def default_plan(backend: str, reduce: str, M: int, N: int, K: int, W: int, dtype, split=None,
                 comm_programs=None) -> tuple[int, int]:
    """``(split, comm_programs)`` the op uses: the caller's, else :data:`EPILOGUE_SPLIT` for the
    epilogue variant (no tail to shorten: the chunks only have to reach the owner before its
    own rows come up, and a few per destination keep each copy large and its start early),
    else the cost model's (:func:`syncopate.ops.driver.gemm_plan`; ``K`` is this rank's
    shard)."""
    if reduce == "epilogue" and split is None:
        split = EPILOGUE_SPLIT
    return driver.gemm_plan("rs", backend, M, N, K, W, dtype, split, comm_programs)


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
    return driver.gemm_op(SPEC, a, b_shard, comm, out, fused, kernel, config,
                          (backend, split, order, mode, comm_programs, reduce))


def _plan(backend, reduce, s, W, dtype, order, split, comm_programs, cfg):
    return (order, *default_plan(backend, reduce, s["m"], s["n"], s["k"], W, dtype, split,
                                 comm_programs))


def explain_shape(op, dims, W, batch=1, causal=False):
    """The per-rank GEMM of the global ``M x N x K`` (A ``[M, K]`` split along K, the rows
    scattered)."""
    M, N, K = dims
    if W > 1 and (M % W or K % W):
        raise LaunchError(f"{op} shards K over the {W} ranks and scatters M: M = {M} and "
                          f"K = {K} must be multiples of {W}")
    return (M, N, K // W) if W > 1 else (M, N, K)


def _check_epilogue_order(backend, M: int, W: int, cfg) -> None:
    """The epilogue reduction is deadlock-free when every program computes all the rows it sends
    before any row it owns (its own rows wait for the other ranks' partials). The compiler puts
    the sent M-tiles first; the kernels walk tiles in groups of ``GROUP_M`` M-tiles, so the
    sent tiles must fill whole groups, and no tile may hold rows of two owners."""
    if "epilogue" not in backends.get(backend, LaunchError).reduce_modes:
        able = [b.name for b in backends.specs() if "epilogue" in b.reduce_modes]
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
    bm, gm = int(cfg.BLOCK_M), int(cfg.GROUP_M)
    rows = M // W
    if rows % bm:
        return cfg  # refused by _check_epilogue_order with the reason
    sent = (W - 1) * (rows // bm)
    while gm > 1 and sent % gm:
        gm //= 2
    return cfg if gm == cfg.GROUP_M else dataclasses.replace(cfg, GROUP_M=gm)


# ------------------------------------------------------------------------------------------
# torch.ops.syncopate.gemm_rs (syncopate.torch_ops)
# ------------------------------------------------------------------------------------------

def _torch_check(a, b_shard, W):
    driver.torch_matrices("gemm_rs", a=a, b_shard=b_shard)
    if a.shape[1] != b_shard.shape[0]:
        raise TorchOpError(f"gemm_rs: a is [M, K/W] = {tuple(a.shape)} and b_shard must be "
                           f"[K/W, N] but is {tuple(b_shard.shape)}: b_shard.shape[0] must be "
                           f"{a.shape[1]}")
    if a.shape[0] % W != 0:
        raise TorchOpError(f"gemm_rs: M = {a.shape[0]} rows is not a multiple of the world size "
                           f"{W}: every rank returns M/W rows; pad M to a multiple of {W}")


def _torch_impl(a, b_shard, group, W):
    """Unfused composition (any device but CUDA): ``torch.mm``, then the group's sum
    reduce-scatter."""
    return driver.reduce_scatter_rows(torch.mm(a, b_shard), group, W)


def _torch_cuda(a, b_shard, comm):
    """The fused GEMM+RS (default variant; ``SYNCOPATE=0`` runs its unfused path)."""
    return gemm_rs(a.contiguous(), b_shard.contiguous(), comm)


def _torch_fake(a, b_shard, W):
    return a.new_empty((a.shape[0] // W, b_shard.shape[1]))


def _torch_backward(ctx, grad_out):
    """``C = RS(A @ B)``: ``dA = AG(dC) @ B^T`` -- ``ag_gemm(dC, B^T)`` -- and ``dB = A^T @
    AG(dC)`` with the gathered ``dC`` that same ``ag_gemm`` returns."""
    a, b_shard = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_a or need_b):
        return None, None, None
    grad_a, grad_full = torch.ops.syncopate.ag_gemm(grad_out, b_shard.t(), ctx.group_name,
                                                    need_b)
    grad_b = torch.mm(a.t(), grad_full) if need_b else None
    return (grad_a if need_a else None), grad_b, None


def _torch_model(a, b_shard, group_name):
    """This rank's ``[M/W, N]`` rows of ``reduce_scatter(a @ b_shard, dim=0)`` (sum over
    ranks; ``[M, K/W]`` x ``[K/W, N]``): the row-parallel linear of tensor parallelism.
    ``group`` as in :func:`ag_gemm`."""
    return torch.ops.syncopate.gemm_rs(a, b_shard, group_name)


SPEC = OpSpec(
    name="gemm_rs", fn=gemm_rs, shape=("m", "n", "k"), variants=("sm", "ce+epilogue", "ce"),
    locals=("triton", "cublas"), fused_section=True,
    bench=Bench(("rs",), SHAPES, "rows:bench_rs"),
    explain=explain_shape,
    gemm=GemmLaunch(
        template="reduce_scatter", operand="c_ptr", buffer="gemm_rs.C", kind="rs", staged=False,
        explicit=("backend", "reduce", "split", "comm_programs", "mode"), check=_check,
        dims=lambda a, b_shard, W: (a.shape[0], b_shard.shape[1], a.shape[1]),
        schedule_shape=lambda s, W: ((s["m"], s["n"]), 0), reference=gemm_rs_reference,
        plan=_plan, unavailable=epilogue_unavailable, variant=_variant),
    torch=TorchOp(schema="(Tensor a, Tensor b_shard, str group_name) -> Tensor",
                  check=_torch_check, impl=_torch_impl, cuda=_torch_cuda, fake=_torch_fake,
                  model=_torch_model, setup=driver.save_operands, backward=_torch_backward,
                  pattern=FxPattern("reduce_scatter_tensor", "c", reduce="sum")))

__all__ = ["EPILOGUE_SPLIT", "SPEC", "default_plan", "epilogue_unavailable", "gemm_rs",
           "gemm_rs_buffer", "gemm_rs_fused_kernel", "gemm_rs_reference", "resolve_variant"]
