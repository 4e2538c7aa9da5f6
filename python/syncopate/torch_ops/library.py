"""``torch.ops.syncopate.*``: the fused ops as ``torch.library`` custom ops.

Why custom ops: ``torch.compile`` treats a custom op as one opaque node with a fake
implementation for shapes, so a model that calls the fused ops traces with
``fullgraph=True`` (a Python function that launches Triton kernels and spins on flags would
break the graph), AOT autograd differentiates through them (:mod:`.autograd`), and Inductor
calls them as extern kernels.

Schemas (the ``group_name`` convention of ``torch.ops._c10d_functional``, :mod:`.groups`):

* ``ag_gemm(Tensor a_shard, Tensor b, str group_name, bool return_a=False) -> (Tensor, Tensor?)``:
  ``all_gather(a_shard, dim=0) @ b`` and, with ``return_a``, the gathered ``A`` itself (what the
  weight gradient needs, and what other users of an all-gather the compile pass replaced read),
  as ``torch.ops.symm_mem.fused_all_gather_matmul``'s ``return_A`` does.
* ``gemm_rs(Tensor a, Tensor b_shard, str group_name) -> Tensor``: this rank's rows of
  ``reduce_scatter(a @ b_shard, dim=0)`` (sum).
* ``reduce_scatter(Tensor x, str group_name) -> Tensor``: the plain (unfused) sum
  reduce-scatter; ``ag_gemm``'s backward uses it for a gradient that flows into the returned
  gathered ``A``.

Implementations: on CUDA tensors the fused kernels of :mod:`syncopate.ops` through the
group's Communicator (``SYNCOPATE=0``: the ops' unfused NCCL path); on any other device
(CPU, tests) the unfused composition -- :mod:`syncopate.runtime.collectives` (torch.distributed
or the loopback group) and ``torch.mm`` -- so the ops run, are differentiated and are
``opcheck``-ed without a GPU.
"""

from __future__ import annotations

import torch

from . import groups
from .groups import TorchOpError

AG_GEMM_SCHEMA = "(Tensor a_shard, Tensor b, str group_name, bool return_a=False) -> (Tensor, Tensor?)"
GEMM_RS_SCHEMA = "(Tensor a, Tensor b_shard, str group_name) -> Tensor"
REDUCE_SCATTER_SCHEMA = "(Tensor x, str group_name) -> Tensor"


# ------------------------------------------------------------------------------------------
# Checks, shared by the fake and the real implementations (the fake one runs at trace time,
# so a wrong shape is reported while compiling, not at the first launch)
# ------------------------------------------------------------------------------------------

def _matrices(op: str, **named) -> None:
    for name, t in named.items():
        if t.dim() != 2:
            raise TorchOpError(f"{op}: {name} must be 2-D, got shape {tuple(t.shape)}: reshape it "
                               f"to a matrix (e.g. {name}.flatten(0, -2) for a batch of rows)")
    (n1, t1), (n2, t2) = named.items()
    if t1.dtype != t2.dtype:
        raise TorchOpError(f"{op}: {n1} is {t1.dtype} but {n2} is {t2.dtype}: cast one of them "
                           f"(e.g. {n2}.to({t1.dtype}))")
    if t1.device != t2.device:
        raise TorchOpError(f"{op}: {n1} is on {t1.device} but {n2} is on {t2.device}: move "
                           f"{n2} with .to({str(t1.device)!r})")


def check_ag_gemm(a_shard, b, W: int) -> None:
    _matrices("ag_gemm", a_shard=a_shard, b=b)
    if a_shard.shape[1] != b.shape[0]:
        raise TorchOpError(f"ag_gemm: a_shard is [M/W, K] = {tuple(a_shard.shape)} and b must be "
                           f"[K, N] but is {tuple(b.shape)}: b.shape[0] must be "
                           f"{a_shard.shape[1]} (pass b, not b.T, for a weight stored [N, K])")


def check_gemm_rs(a, b_shard, W: int) -> None:
    _matrices("gemm_rs", a=a, b_shard=b_shard)
    if a.shape[1] != b_shard.shape[0]:
        raise TorchOpError(f"gemm_rs: a is [M, K/W] = {tuple(a.shape)} and b_shard must be "
                           f"[K/W, N] but is {tuple(b_shard.shape)}: b_shard.shape[0] must be "
                           f"{a.shape[1]}")
    if a.shape[0] % W != 0:
        raise TorchOpError(f"gemm_rs: M = {a.shape[0]} rows is not a multiple of the world size "
                           f"{W}: every rank returns M/W rows; pad M to a multiple of {W}")


def check_reduce_scatter(x, W: int) -> None:
    if x.dim() < 1 or x.shape[0] % W != 0:
        raise TorchOpError(f"reduce_scatter: x (shape {tuple(x.shape)}) must have a first dim "
                           f"that is a multiple of the world size {W}")


# ------------------------------------------------------------------------------------------
# ag_gemm
# ------------------------------------------------------------------------------------------

@torch.library.custom_op("syncopate::ag_gemm", mutates_args=(), schema=AG_GEMM_SCHEMA)
def ag_gemm(a_shard, b, group_name, return_a=False):
    """Unfused composition (any device but CUDA): all-gather ``a_shard`` through the group's
    collectives, then ``torch.mm``."""
    from ..runtime import collectives
    ref = groups.resolve(group_name)
    check_ag_gemm(a_shard, b, ref.world_size)
    gathered = _all_gather(a_shard, ref, collectives)
    return torch.mm(gathered, b), (gathered if return_a else None)


def _all_gather(a_shard, ref, collectives):
    Ms, K = a_shard.shape
    gathered = a_shard.new_empty((Ms * ref.world_size, K))
    collectives.all_gather_into_tensor(gathered, a_shard.contiguous(), group=ref.group)
    return gathered


@ag_gemm.register_kernel("cuda")
def _ag_gemm_cuda(a_shard, b, group_name, return_a=False):
    """The fused AG+GEMM (:func:`syncopate.ops.ag_gemm`; ``SYNCOPATE=0`` runs its unfused
    path). The gathered A, when asked for, is a copy of the op's symmetric A buffer after the
    kernel: every rank's rows are there (push and pull alike), and no peer writes the buffer
    again before this rank's next launch signals ENTRY, which the copy precedes in stream
    order (docs/fused-abi.md, "The handshake")."""
    from .. import ops
    from ..runtime import collectives
    from ..runtime.fused import fused_enabled
    ref = groups.resolve(group_name)
    check_ag_gemm(a_shard, b, ref.world_size)
    comm = groups.communicator(ref, a_shard.device)
    a_c, b_c = a_shard.contiguous(), b.contiguous()
    if fused_enabled():
        out = ops.ag_gemm(a_c, b_c, comm, fused=True)
        full = None
        if return_a:
            full = ops.ag_gemm_buffer(comm, a_c.shape[0], a_c.shape[1], a_c.dtype).clone()
        return out, full
    if not return_a:
        return ops.ag_gemm(a_c, b_c, comm, fused=False), None
    # unfused and the gathered A is wanted: gather once, the ops' local kernel on it
    from ..ops import _gemm
    gathered = _all_gather(a_c, ref, collectives)
    out = b_c.new_empty((gathered.shape[0], b_c.shape[1]))
    _gemm.run_local(_gemm.gemm_call("tma", gathered, b_c, out, None))
    return out, gathered


@ag_gemm.register_fake
def _ag_gemm_fake(a_shard, b, group_name, return_a=False):
    W = groups.world_size(group_name)
    check_ag_gemm(a_shard, b, W)
    M = a_shard.shape[0] * W
    full = a_shard.new_empty((M, a_shard.shape[1])) if return_a else None
    return a_shard.new_empty((M, b.shape[1])), full


# ------------------------------------------------------------------------------------------
# gemm_rs
# ------------------------------------------------------------------------------------------

@torch.library.custom_op("syncopate::gemm_rs", mutates_args=(), schema=GEMM_RS_SCHEMA)
def gemm_rs(a, b_shard, group_name):
    """Unfused composition (any device but CUDA): ``torch.mm``, then the group's sum
    reduce-scatter."""
    from ..runtime import collectives
    ref = groups.resolve(group_name)
    check_gemm_rs(a, b_shard, ref.world_size)
    return _reduce_scatter(torch.mm(a, b_shard), ref, collectives)


def _reduce_scatter(x, ref, collectives):
    out = x.new_empty((x.shape[0] // ref.world_size, *x.shape[1:]))
    collectives.reduce_scatter_tensor(out, x.contiguous(), group=ref.group)
    return out


@gemm_rs.register_kernel("cuda")
def _gemm_rs_cuda(a, b_shard, group_name):
    """The fused GEMM+RS (:func:`syncopate.ops.gemm_rs`, default variant; ``SYNCOPATE=0``
    runs its unfused path)."""
    from .. import ops
    ref = groups.resolve(group_name)
    check_gemm_rs(a, b_shard, ref.world_size)
    comm = groups.communicator(ref, a.device)
    return ops.gemm_rs(a.contiguous(), b_shard.contiguous(), comm)


@gemm_rs.register_fake
def _gemm_rs_fake(a, b_shard, group_name):
    W = groups.world_size(group_name)
    check_gemm_rs(a, b_shard, W)
    return a.new_empty((a.shape[0] // W, b_shard.shape[1]))


# ------------------------------------------------------------------------------------------
# reduce_scatter (unfused; ag_gemm's backward for a gradient of the returned gathered A)
# ------------------------------------------------------------------------------------------

@torch.library.custom_op("syncopate::reduce_scatter", mutates_args=(), schema=REDUCE_SCATTER_SCHEMA)
def reduce_scatter(x, group_name):
    """Sum reduce-scatter along dim 0 through the group's collectives (NCCL, gloo, loopback)."""
    from ..runtime import collectives
    ref = groups.resolve(group_name)
    check_reduce_scatter(x, ref.world_size)
    return _reduce_scatter(x, ref, collectives)


@reduce_scatter.register_fake
def _reduce_scatter_fake(x, group_name):
    W = groups.world_size(group_name)
    check_reduce_scatter(x, W)
    return x.new_empty((x.shape[0] // W, *x.shape[1:]))
