"""The group a model runs over, and the plain collectives of the unfused path.

:class:`Parallel` is what every module of :mod:`syncopate.nn` holds: the group's name (what
``torch.ops.syncopate.*`` take), the group object (what :mod:`syncopate.runtime.collectives`
takes: a torch process group or a loopback group), this rank and the world size, and the
:class:`~syncopate.runtime.Communicator` when one was given. Given a Communicator it is
registered for the group (:func:`syncopate.torch_ops.register_communicator`), so every op of
every layer runs on that one Communicator -- its symmetric buffers and fused kernels, cached
by shape, are shared by all layers of the same shape.

The unfused path (``fused=False``) is the same module written with plain collectives:
:func:`all_gather_seq` / :func:`reduce_scatter_seq` (autograd through each other, on the
group's collectives: NCCL, gloo or loopback) next to cuBLAS GEMMs and SDPA.

Replicated parameters (a norm's weight under sequence parallelism; every weight under context
parallelism) see only this rank's tokens, so their gradients are partial sums:
:func:`sync_grads` all-reduces them, once per step, before the optimizer (Megatron's
``finalize_model_grads``). They are marked with :data:`REPLICATED`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import torch_ops as sto
from ..errors import UsageError
from ..ops import driver
from ..runtime import collectives
from ..runtime.communicator import Communicator

#: the attribute that marks a replicated parameter (its gradient is this rank's partial sum)
REPLICATED = "syncopate_replicated"


@dataclass(frozen=True)
class Parallel:
    """The group of a model on this rank (module docstring)."""

    name: str
    group: object
    rank: int
    world_size: int
    comm: Communicator | None = None

    @classmethod
    def of(cls, comm) -> "Parallel":
        """``comm``: a :class:`Parallel`, a :class:`~syncopate.runtime.Communicator` (registered
        for its group: the fused ops use it), a torch process group, a loopback group, a group
        name, or None (the calling rank's default group)."""
        if isinstance(comm, Parallel):
            return comm
        communicator = comm if isinstance(comm, Communicator) else None
        if communicator is not None:
            name = sto.register_communicator(communicator)
        else:
            name = sto.group_name(comm)
        ref = sto.resolve(name)
        return cls(name, ref.group, ref.rank, ref.world_size, communicator)


def mark_replicated(p: torch.nn.Parameter) -> torch.nn.Parameter:
    """Mark ``p`` replicated across the group (its gradient is summed by :func:`sync_grads`)."""
    setattr(p, REPLICATED, True)
    return p


def sync_grads(module: torch.nn.Module, par) -> int:
    """All-reduce (sum) the gradients of ``module``'s replicated parameters over the group, in
    one flat buffer per dtype; returns the number of parameters synced. Call it on every rank
    after the backward and before the optimizer step."""
    par = Parallel.of(par)
    grads = [p.grad for p in module.parameters()
             if getattr(p, REPLICATED, False) and p.grad is not None]
    if par.world_size == 1 or not grads:
        return len(grads)
    for dtype in sorted({g.dtype for g in grads}, key=str):
        same = [g for g in grads if g.dtype == dtype]
        flat = torch.cat([g.reshape(-1) for g in same])
        collectives.all_reduce(flat, group=par.group)
        offset = 0
        for g in same:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
    return len(grads)


class _AllGather(torch.autograd.Function):
    """``all_gather`` along dim 0 (rank order); its backward the reduce-scatter."""

    @staticmethod
    def forward(ctx, x, group, W):
        ctx.group, ctx.W = group, W
        return driver.all_gather_rows(x, group, W)

    @staticmethod
    def backward(ctx, g):
        return driver.reduce_scatter_rows(g, ctx.group, ctx.W), None, None


class _ReduceScatter(torch.autograd.Function):
    """Sum ``reduce_scatter`` along dim 0; its backward the all-gather."""

    @staticmethod
    def forward(ctx, x, group, W):
        ctx.group, ctx.W = group, W
        return driver.reduce_scatter_rows(x, group, W)

    @staticmethod
    def backward(ctx, g):
        return driver.all_gather_rows(g, ctx.group, ctx.W), None, None


def all_gather_seq(x, par: Parallel):
    """Every rank's ``x`` concatenated along dim 0 in rank order (differentiable)."""
    if par.world_size == 1:
        return x
    return _AllGather.apply(x, par.group, par.world_size)


def reduce_scatter_seq(x, par: Parallel):
    """This rank's rows of the sum over ranks of ``x`` along dim 0 (differentiable)."""
    if par.world_size == 1:
        return x
    if x.shape[0] % par.world_size:
        raise UsageError(f"reduce_scatter_seq: {x.shape[0]} rows do not divide over "
                         f"{par.world_size} ranks")
    return _ReduceScatter.apply(x, par.group, par.world_size)


__all__ = ["Parallel", "REPLICATED", "all_gather_seq", "mark_replicated", "reduce_scatter_seq",
           "sync_grads"]
