"""All-gather + GEMM: ``C = all_gather(A, dim=0) @ B``, fused.

``A`` is sharded on M across the ranks (``a_shard`` ``[M/W, K]`` on every rank), ``B`` is
local (``[K, N_local]``, e.g. a column shard of a weight in tensor parallelism). Built from
parts, no hand-written fused kernel: the local GEMM of :mod:`syncopate.kernels`, the
``all_gather`` schedule template and :func:`syncopate.fuse`, run by the generic driver
(:func:`syncopate.ops.driver.gemm_op`) from this op's :data:`SPEC`.

State kept per communicator (``comm.cache``), per shape/dtype: the symmetric ``A`` buffer
``[M, K]`` (each rank copies its shard into its own rows, or writes there directly: pass
``ag_gemm_buffer(...)`` rows as ``a_shard`` and the copy is skipped) and one FusedKernel per
(backend, split, order, mode, comm programs, kernel, config). The FusedKernel defers its
CONSUMED wait to :meth:`before_staging`, called right before the shard is copied in.
"""

from __future__ import annotations

import torch

from ..errors import LaunchError, TorchOpError
from . import driver
from .spec import Bench, FxPattern, GemmLaunch, OpSpec, TorchOp


#: the benchmark's shapes, global ``(N, K)``: B per rank ``[K, N/W]``
SHAPES = ((14336, 4096), (28672, 8192), (29568, 8192))


def _check(a_shard, b, comm, out=None):
    driver.check_matrices(a_shard=a_shard, b=b)
    if a_shard.shape[1] != b.shape[0]:
        raise LaunchError(f"a_shard is [M/W, K] = {tuple(a_shard.shape)} and b must be [K, N] but "
                          f"is {tuple(b.shape)}: b.shape[0] must be {a_shard.shape[1]}")
    driver.check_comm_device(comm, ("a_shard", a_shard), ("b", b))


def ag_gemm_buffer(comm, m_shard: int, K: int, dtype):
    """The symmetric ``[M, K]`` A buffer the op uses for this shape (allocated on first use, a
    collective). Writing this rank's rows (``buf[rank*m_shard:(rank+1)*m_shard]``) and passing
    them as ``a_shard`` skips the staging copy."""
    return driver.symmetric_buffer(comm, SPEC.gemm.buffer, (int(m_shard) * comm.world_size, K),
                                   dtype)


def ag_gemm_reference(a_shard, b, comm, *, kernel: str = "tma", config=None, out=None):
    """The unfused path: NCCL ``all_gather_into_tensor`` then the same local kernel (or cuBLAS
    with ``kernel='cublas'``)."""
    _check(a_shard, b, comm)
    gathered = driver.all_gather_rows(a_shard, comm.group, comm.world_size)
    if out is None:
        out = torch.empty((gathered.shape[0], b.shape[1]), device=b.device, dtype=b.dtype)
    driver.local_gemm(kernel, gathered, b, out, config)
    return out


def ag_gemm_fused_kernel(comm, M: int, K: int, dtype, *, backend="sm", split=1, order="swizzle",
                         mode=None, comm_programs=0, kernel="tma", config=None):
    """The (cached) FusedKernel the op launches; exposed for tests and the benchmark."""
    return driver.fused_kernel(comm, SPEC, (M, K), 0, dtype, backend=backend, split=split,
                               order=order, mode=mode, comm_programs=comm_programs,
                               kernel=kernel, config=config)


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
    (:func:`syncopate.ops.driver.world_size_one`).

    ``backend``: ``'sm'`` (comm programs in the kernel), ``'ce'`` (copy engine on a side
    stream) or ``'nvshmem'`` (needs ``Communicator(symm_backend='nvshmem')``). ``kernel`` and
    ``config`` select our local GEMM (:mod:`syncopate.kernels`); ``kernel='cublas'`` the
    unfused path with ``torch.matmul``. Result contract: with our kernel the fused and the
    unfused path give bitwise the local kernel's result on the gathered A; when the op chose
    cuBLAS (``kernel`` and ``config`` left out) the result is cuBLAS's (same math, fp32
    accumulation, other rounding) -- pin ``kernel='tma'`` for our kernel's bits.
    """
    return driver.gemm_op(SPEC, a_shard, b, comm, out, fused, kernel, config,
                          (backend, split, order, mode, comm_programs, None))


def _plan(backend, reduce, s, W, dtype, order, split, comm_programs, cfg):
    return (order, *driver.gemm_plan("ag", backend, s["m"], s["n"], s["k"], W, dtype, split,
                                     comm_programs))


def explain_shape(op, dims, W, batch=1, causal=False):
    """The per-rank GEMM of the global ``M x N x K`` (A ``[M, K]`` gathered, B ``[K, N]``
    split by columns, each rank ``N/W``)."""
    M, N, K = dims
    if W > 1 and (M % W or N % W):
        raise LaunchError(f"{op} shards M (rows of A) and N (columns of B) over the {W} ranks: "
                          f"M = {M} and N = {N} must be multiples of {W}")
    return (M, N // W, K) if W > 1 else (M, N, K)


# ------------------------------------------------------------------------------------------
# torch.ops.syncopate.ag_gemm (syncopate.torch_ops)
# ------------------------------------------------------------------------------------------

def _torch_check(a_shard, b, W, return_a=False):
    driver.torch_matrices("ag_gemm", a_shard=a_shard, b=b)
    if a_shard.shape[1] != b.shape[0]:
        raise TorchOpError(f"ag_gemm: a_shard is [M/W, K] = {tuple(a_shard.shape)} and b must be "
                           f"[K, N] but is {tuple(b.shape)}: b.shape[0] must be "
                           f"{a_shard.shape[1]} (pass b, not b.T, for a weight stored [N, K])")


def _torch_impl(a_shard, b, group, W, return_a=False):
    """Unfused composition (any device but CUDA): all-gather ``a_shard`` through the group's
    collectives, then ``torch.mm``."""
    gathered = driver.all_gather_rows(a_shard, group, W)
    return torch.mm(gathered, b), (gathered if return_a else None)


def _torch_cuda(a_shard, b, comm, return_a=False):
    """The fused AG+GEMM (``SYNCOPATE=0`` runs its unfused path). The gathered A, when asked
    for, is a copy of the op's symmetric A buffer after the kernel: every rank's rows are
    there (push and pull alike), and no peer writes the buffer again before this rank's next
    launch signals ENTRY, which the copy precedes in stream order (docs/fused-abi.md, "The
    handshake")."""
    a_c, b_c = a_shard.contiguous(), b.contiguous()
    if driver.use_fused(None):
        out = ag_gemm(a_c, b_c, comm, fused=True)
        full = None
        if return_a:
            full = ag_gemm_buffer(comm, a_c.shape[0], a_c.shape[1], a_c.dtype).clone()
        return out, full
    if not return_a:
        return ag_gemm(a_c, b_c, comm, fused=False), None
    # unfused and the gathered A is wanted: gather once, the ops' local kernel on it
    gathered = driver.all_gather_rows(a_c, comm.group, comm.world_size)
    out = b_c.new_empty((gathered.shape[0], b_c.shape[1]))
    driver.run_local(driver.gemm_call("tma", gathered, b_c, out, None))
    return out, gathered


def _torch_fake(a_shard, b, W, return_a=False):
    M = a_shard.shape[0] * W
    full = a_shard.new_empty((M, a_shard.shape[1])) if return_a else None
    return a_shard.new_empty((M, b.shape[1])), full


def _torch_setup(ctx, inputs, output):
    _, b, group_name = inputs[:3]
    _, full = output
    if b.requires_grad and full is None:
        raise TorchOpError("torch.ops.syncopate.ag_gemm: b requires grad but return_a=False, so "
                           "the backward has no gathered A for b's gradient: call it with "
                           "return_a=True (syncopate.torch_ops.ag_gemm does so when b requires "
                           "grad)")
    ctx.group_name = group_name
    ctx.save_for_backward(b, full)


def _torch_backward(ctx, grad_out, grad_full):
    """``C = AG(A) @ B``: ``dA = RS(dC @ B^T)`` -- ``gemm_rs(dC, B^T)`` -- and ``dB = AG(A)^T @
    dC`` with the gathered ``A`` the forward returned (``return_a=True``: no second
    all-gather); a gradient flowing into that gathered ``A`` reaches ``a_shard`` through
    ``torch.ops.syncopate.reduce_scatter``."""
    b, full = ctx.saved_tensors
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.syncopate.gemm_rs(grad_out, b.t(), ctx.group_name)
        if grad_full is not None:
            grad_a = grad_a + torch.ops.syncopate.reduce_scatter(grad_full, ctx.group_name)
    if ctx.needs_input_grad[1]:
        grad_b = torch.mm(full.t(), grad_out)
    return grad_a, grad_b, None, None


def _torch_model(a_shard, b, group_name):
    """``all_gather(a_shard, dim=0) @ b`` (``[M/W, K]`` x ``[K, N]`` -> ``[M, N]``): the column-
    parallel linear of tensor parallelism with sequence-sharded input. ``group``: a group name,
    a torch process group, a Communicator or None (the default group). Under ``torch.compile``
    a name, a torch process group or None becomes a constant of the graph; a loopback rank
    passes the name (computed with :func:`group_name` outside the compiled code).

    The gathered ``A`` is kept for the backward (``return_a=True``) only when ``b`` needs a
    gradient: inference pays no copy."""
    keep = torch.is_grad_enabled() and b.requires_grad
    out, _ = torch.ops.syncopate.ag_gemm(a_shard, b, group_name, keep)
    return out


SPEC = OpSpec(
    name="ag_gemm", fn=ag_gemm, shape=("m", "n", "k"), variants=("sm", "ce"),
    locals=("triton", "cublas"), fused_section=True,
    bench=Bench(("ag",), SHAPES, "rows:bench_ag", ms=((8192, 1024, 4096), (8192, 1024))),
    explain=explain_shape,
    gemm=GemmLaunch(
        template="all_gather", operand="a_ptr", buffer="ag_gemm.A", kind="ag", staged=True,
        explicit=("backend", "split", "comm_programs", "mode"), check=_check,
        dims=lambda a_shard, b, W: (a_shard.shape[0] * W, b.shape[1], a_shard.shape[1]),
        schedule_shape=lambda s, W: ((s["m"], s["k"]), 0), reference=ag_gemm_reference,
        plan=_plan),
    torch=TorchOp(schema="(Tensor a_shard, Tensor b, str group_name, bool return_a=False) -> "
                         "(Tensor, Tensor?)",
                  check=_torch_check, impl=_torch_impl, cuda=_torch_cuda, fake=_torch_fake,
                  model=_torch_model, setup=_torch_setup, backward=_torch_backward,
                  pattern=FxPattern("all_gather_into_tensor", "a", returns_gathered="return_a")))

__all__ = ["SPEC", "ag_gemm", "ag_gemm_buffer", "ag_gemm_fused_kernel", "ag_gemm_reference"]
