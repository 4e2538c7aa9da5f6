"""Weight all-gather + GEMM: ``C = a @ all_gather(w_shard)``, fused -- the weight all-gather of
sharded data parallelism (FSDP / ZeRO-3) with the GEMM that consumes it.

Every rank holds all of its activations ``a`` ``[M, K]`` and one shard of the weight
``W`` ``[K, N]``, sharded along

* its output dim N (``w_shard`` ``[K, N/W]``: column blocks of ``W``, i.e. row blocks of the
  ``[N, K]`` weight of ``nn.Linear`` -- pass ``weight_shard.t()``): the chunks are column
  blocks, and a tile waits only for the block of its columns (tiles run in arrival order);
* or its input dim K (``w_shard`` ``[K/W, N]``, rows of ``W``): every tile's K loop reads every
  chunk, waiting for each at the first K block it needs (same loop order: same bits).

Which one is read from the shapes (``w_shard.shape[0]`` is ``K`` or ``K / W``). Built from
parts by the generic driver (:func:`syncopate.ops.driver.gemm_op`) from :data:`SPEC`: the local
GEMM of :mod:`syncopate.kernels` on a symmetric ``[K, N]`` weight buffer each rank stages its
shard into, fused with the ``all_gather`` template over that buffer (operand ``b_ptr``). With
our kernel the fused and the unfused path (NCCL all-gather of the shards, then the same
kernel) give bitwise the local kernel's result on the gathered weight.

Backward (``torch.ops.syncopate.ag_weight_gemm``): ``dA = dC @ W^T`` -- this op again, on
``w_shard.t()`` (the weight gathered again, fused, as FSDP re-gathers it), whose sharded dim
is then the other one -- and ``dW_shard = reduce_scatter(A^T @ dC)`` along the sharded dim --
``gemm_rs`` (``A^T @ dC`` for K; ``(dC^T @ A)^T`` for N, whose rows are W's columns).
"""

from __future__ import annotations

import torch

from ..errors import LaunchError, TorchOpError
from . import driver
from .spec import GemmLaunch, OpSpec, TorchOp


def _split(a, w_shard, W: int) -> int | None:
    """The dim of ``W`` ``[K, N]`` the shard is cut along: 1 (N: ``[K, N/W]``), 0 (K:
    ``[K/W, N]``) or None (neither). At W = 1 both read 1."""
    K, rows = a.shape[1], w_shard.shape[0]
    return 1 if rows == K else 0 if rows * W == K else None


def _check(a, w_shard, comm, out=None):
    driver.check_matrices(a=a, w_shard=w_shard)
    _check_split(a, w_shard, comm.world_size, LaunchError)
    driver.check_comm_device(comm, ("a", a), ("w_shard", w_shard))


def _check_split(a, w_shard, W: int, error) -> None:
    if _split(a, w_shard, W) is None:
        K = a.shape[1]
        raise error(f"a is [M, K] = {tuple(a.shape)}, so w_shard must be [K, N/W] = [{K}, ...] "
                    f"(the weight sharded along N) or [K/W, N] (along K: {K} rows over {W} "
                    f"ranks) but is {tuple(w_shard.shape)}")


def _gather(a, w_shard, group, W: int):
    """The whole ``[K, N]`` weight from every rank's shard through the group's collectives:
    rows of ``W`` gathered as they are, columns as rows of ``W^T`` (a transposed view)."""
    if _split(a, w_shard, W) == 0:
        return driver.all_gather_rows(w_shard, group, W)
    return driver.all_gather_rows(w_shard.t(), group, W).t()


def ag_weight_gemm_reference(a, w_shard, comm, *, kernel: str = "tma", config=None, out=None):
    """The unfused path: NCCL all-gather of the weight's shards, then the same local kernel
    (or cuBLAS with ``kernel='cublas'``) on the gathered ``[K, N]`` row-major weight."""
    _check(a, w_shard, comm)
    # laid out [K, N] row-major, as the fused path's buffer: the same kernel reads the same
    full = _gather(a, w_shard, comm.group, comm.world_size).contiguous()
    if out is None:
        out = torch.empty((a.shape[0], full.shape[1]), device=a.device, dtype=a.dtype)
    driver.local_gemm(kernel, a, full, out, config)
    return out


def ag_weight_gemm_buffer(comm, K: int, N: int, dtype):
    """The symmetric ``[K, N]`` weight buffer of the fused path (allocated on first use, a
    collective). Writing this rank's block (rows ``rank*K/W ...`` or columns ``rank*N/W ...``)
    and passing it as ``w_shard`` skips the staging copy."""
    return driver.symmetric_buffer(comm, SPEC.gemm.buffer, (K, N), dtype)


def ag_weight_gemm(a, w_shard, comm, *, backend: str | None = None, split=None,
                   order: str = "swizzle", mode=None, comm_programs=None,
                   kernel: str | None = None, config=None, out=None, fused=None):
    """``a @ all_gather(w_shard)`` -> ``[M, N]`` (module docstring: which dim is sharded).

    The path, options and result contract as :func:`syncopate.ops.ag_gemm`: left to the op,
    the cost model's fastest (``syncopate explain ag_weight_gemm --shape M,N,K,dim ...``) of
    its fused variants (``sm``, ``ce``) and the unfused path (NCCL all-gather + our kernel or
    cuBLAS), the same on every rank; ``fused=True`` or any of ``backend``/``split``/
    ``comm_programs``/``mode``: fused; ``fused=False`` (or ``SYNCOPATE=0``): unfused with our
    kernel; world size 1: the local GEMM alone."""
    return driver.gemm_op(SPEC, a, w_shard, comm, out, fused, kernel, config,
                          (backend, split, order, mode, comm_programs, None))


def _dims(a, w_shard, W):
    """The decision shape: the local GEMM ``M x N x K`` on the whole weight, and the dim of
    the weight that is gathered (0: K, 1: N)."""
    dim = _split(a, w_shard, W)
    N = w_shard.shape[1] * (W if dim == 1 else 1)
    return a.shape[0], N, a.shape[1], dim


def _plan(backend, reduce, s, W, dtype, order, split, comm_programs, cfg):
    """The all-gather + GEMM plan of the cost model with the gathered tensor's rows first:
    ``W`` ``[K, N]`` by rows, ``W^T`` ``[N, K]`` by columns (the same chunks and FLOPs)."""
    rows, cols = (s["k"], s["n"]) if s["dim"] == 0 else (s["n"], s["k"])
    return (order, *driver.gemm_plan("ag", backend, rows, s["m"], cols, W, dtype, split,
                                     comm_programs))


def _explain(op, dims, W, batch=1, causal=False):
    """``M,N,K,dim``: activations ``[M, K]``, the weight ``[K, N]`` sharded along ``dim``."""
    M, N, K, dim = dims
    if dim not in (0, 1) or (dim == 0 and K % W) or (dim == 1 and N % W):
        raise LaunchError(f"{op} --shape M,N,K,dim: the weight [K, N] is sharded along dim 0 (K)"
                          f" or 1 (N), a multiple of the {W} ranks; got {','.join(map(str, dims))}")
    return M, N, K, dim


# ------------------------------------------------------------------------------------------
# torch.ops.syncopate.ag_weight_gemm (syncopate.torch_ops)
# ------------------------------------------------------------------------------------------

def _torch_check(a, w_shard, W):
    driver.torch_matrices("ag_weight_gemm", a=a, w_shard=w_shard)
    _check_split(a, w_shard, W, TorchOpError)


def _torch_impl(a, w_shard, group, W):
    """Unfused composition (any device but CUDA): the weight all-gathered through the group's
    collectives, then ``torch.mm``."""
    return torch.mm(a, _gather(a, w_shard, group, W))


def _torch_cuda(a, w_shard, comm):
    return ag_weight_gemm(a.contiguous(), w_shard, comm)


def _torch_fake(a, w_shard, W):
    return a.new_empty((a.shape[0], _dims(a, w_shard, W)[1]))


def _torch_backward(ctx, grad_out):
    """``dA = dC @ W^T``: this op on ``w_shard.t()`` (the weight gathered again, along its
    other dim); ``dW_shard``: the sum over ranks of ``A^T @ dC``, reduce-scattered along the
    sharded dim by ``gemm_rs`` (rows of ``W``: ``A^T @ dC``; its columns: the rows of
    ``dC^T @ A``, transposed)."""
    a, w_shard = ctx.saved_tensors
    g = ctx.group_name
    grad_a = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.syncopate.ag_weight_gemm(grad_out, w_shard.t(), g)
    if ctx.needs_input_grad[1]:
        if w_shard.shape[0] != a.shape[1]:  # sharded along K
            grad_w = torch.ops.syncopate.gemm_rs(a.t(), grad_out, g)
        else:
            grad_w = torch.ops.syncopate.gemm_rs(grad_out.t(), a, g).t()
    return grad_a, grad_w, None


def _torch_model(a, w_shard, group_name):
    """``a @ all_gather(w_shard)`` (``[M, K]`` x the weight ``[K, N]`` sharded along N or K):
    the FSDP / ZeRO-3 linear, differentiable (the weight's gradient reduce-scattered)."""
    return torch.ops.syncopate.ag_weight_gemm(a, w_shard, group_name)


SPEC = OpSpec(
    name="ag_weight_gemm", fn=ag_weight_gemm, shape=("m", "n", "k", "dim"), flags=("dim",),
    variants=("sm", "ce"), locals=("triton", "cublas"),
    explain_shape="M,N,K,dim (the weight [K, N] sharded along dim 0 or 1; e.g. "
                  "8192,14336,4096,1)", explain=_explain,
    gemm=GemmLaunch(
        template="all_gather", operand="b_ptr", buffer="ag_weight_gemm.W", kind="ag", staged=True,
        explicit=("backend", "split", "comm_programs", "mode"), check=_check, dims=_dims,
        schedule_shape=lambda s, W: ((s["k"], s["n"]), s["dim"]),
        reference=ag_weight_gemm_reference, plan=_plan, stages_y=True),
    torch=TorchOp(schema="(Tensor a, Tensor w_shard, str group_name) -> Tensor",
                  check=_torch_check, impl=_torch_impl, cuda=_torch_cuda, fake=_torch_fake,
                  model=_torch_model, setup=driver.save_operands, backward=_torch_backward))

__all__ = ["SPEC", "ag_weight_gemm", "ag_weight_gemm_buffer", "ag_weight_gemm_reference"]
