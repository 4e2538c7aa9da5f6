"""``torch.ops.syncopate.*``: the registered ops with a ``torch.library`` schema
(``OpSpec.torch``: ``ag_gemm``, ``gemm_rs``, ...) as custom ops, and the plain
``reduce_scatter`` their backwards use.

Why custom ops: ``torch.compile`` treats a custom op as one opaque node with a fake
implementation for shapes, so a model that calls the fused ops traces with
``fullgraph=True`` (a Python function that launches Triton kernels and spins on flags would
break the graph), AOT autograd differentiates through them (each op's ``TorchOp.backward``),
and Inductor calls them as extern kernels.

Every op's schema is ``(Tensor x, Tensor y, str group_name, ...)`` (the ``group_name``
convention of ``torch.ops._c10d_functional``, :mod:`.groups`); this module resolves the name
and hands the op's own functions the group (world size, collectives) or its Communicator.
Implementations: on CUDA tensors the fused op through the group's Communicator
(``SYNCOPATE=0``: the op's unfused NCCL path); on any other device (CPU, tests) the unfused
composition -- :mod:`syncopate.runtime.collectives` (torch.distributed or the loopback group)
and ``torch.mm`` -- so the ops run, are differentiated and are ``opcheck``-ed without a GPU.

* ``reduce_scatter(Tensor x, str group_name) -> Tensor``: the plain (unfused) sum
  reduce-scatter; ``ag_gemm``'s backward uses it for a gradient that flows into the returned
  gathered ``A``.
"""

from __future__ import annotations

import torch

from ..ops import REGISTRY
from ..ops.driver import reduce_scatter_rows
from . import groups
from .groups import TorchOpError

REDUCE_SCATTER_SCHEMA = "(Tensor x, str group_name) -> Tensor"


def _register(name: str, t):
    """``torch.ops.syncopate.<name>`` from the ``TorchOp`` ``t``; the custom op. Its first
    ``t.tensors`` arguments are tensors, then ``group_name``, then the rest."""
    n = t.tensors

    def checked(args):
        """The group ``args[n]`` names, once ``t.check`` has passed the arguments."""
        ref = groups.resolve(args[n])
        t.check(*args[:n], ref.world_size, *args[n + 1:])
        return ref

    def impl(*args):
        ref = checked(args)
        return t.impl(*args[:n], ref.group, ref.world_size, *args[n + 1:])

    def cuda(*args):
        return t.cuda(*args[:n], groups.communicator(checked(args), args[0].device),
                      *args[n + 1:])

    def fake(*args):
        return t.fake(*args[:n], checked(args).world_size, *args[n + 1:])

    op = torch.library.custom_op(f"syncopate::{name}", impl, mutates_args=(), schema=t.schema)
    op.register_kernel("cuda")(cuda)
    op.register_fake(fake)
    if t.backward is not None:
        op.register_autograd(t.backward, setup_context=t.setup)
    return op


def _torch_ops():
    """``(name, TorchOp)`` of every registered op with a torch schema, each followed by its
    companions' (``<name>_<suffix>``, e.g. a backward)."""
    for name, spec in REGISTRY.items():
        if spec.torch is not None:
            yield name, spec.torch
            yield from ((f"{name}_{suffix}", t) for suffix, t in spec.torch.companions)


#: name -> the custom op of every registered op with a torch schema (and its companions)
OPS = {name: _register(name, t) for name, t in _torch_ops()}


def check_reduce_scatter(x, W: int) -> None:
    if x.dim() < 1 or x.shape[0] % W != 0:
        raise TorchOpError(f"reduce_scatter: x (shape {tuple(x.shape)}) must have a first dim "
                           f"that is a multiple of the world size {W}")


@torch.library.custom_op("syncopate::reduce_scatter", mutates_args=(), schema=REDUCE_SCATTER_SCHEMA)
def reduce_scatter(x, group_name):
    """Sum reduce-scatter along dim 0 through the group's collectives (NCCL, gloo, loopback)."""
    ref = groups.resolve(group_name)
    check_reduce_scatter(x, ref.world_size)
    return reduce_scatter_rows(x, ref.group, ref.world_size)


@reduce_scatter.register_fake
def _reduce_scatter_fake(x, group_name):
    W = groups.resolve(group_name).world_size
    check_reduce_scatter(x, W)
    return x.new_empty((x.shape[0] // W, *x.shape[1:]))
