"""The group a model runs over, and the plain collectives of the unfused path.

:class:`Parallel` is what every module of :mod:`syncopate.nn` holds: the group's name (what
``torch.ops.syncopate.*`` take), the group object (what :mod:`syncopate.runtime.collectives`
takes: a torch process group or a loopback group), this rank and the world size, and the
:class:`~syncopate.runtime.Communicator` when one was given. Given a Communicator it is
registered for the group (:func:`syncopate.torch_ops.register_communicator`), so every op of
every layer runs on that one Communicator -- its symmetric buffers and fused kernels, cached
by shape, are shared by all layers of the same shape.

The unfused path (``fused=False``) is the same module written with plain collectives:
:func:`all_gather_seq` / :func:`reduce_scatter_seq` and :func:`heads_of` / :func:`sequence_of`
(Ulysses' all-to-alls) -- each pair autograd through each other, on the group's collectives:
NCCL, gloo or loopback -- next to cuBLAS GEMMs and SDPA.

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
from ..ops.ulysses import to_heads, to_sequence
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
        if isinstance(comm, Communicator):
            ref = sto.resolve(sto.register_communicator(comm))
            return cls(ref.name, ref.group, ref.rank, ref.world_size, comm)
        ref = sto.resolve(sto.group_name(comm))
        return cls(ref.name, ref.group, ref.rank, ref.world_size)

    def communicator(self, device) -> Communicator:
        """The Communicator the fused ops use on ``device``: the one given, else the group's
        (the registered one, or one made at the first call: ``torch_ops.groups.communicator``)."""
        return self.comm or sto.groups.communicator(sto.resolve(self.name), device)


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
        for g, part in zip(same, flat.split([g.numel() for g in same])):
            g.copy_(part.view_as(g))
    return len(grads)


def _differentiable(forward, backward, doc: str):
    """A torch.autograd.Function ``apply(x, group, W)``: ``forward(x, group, W)``, its gradient
    ``backward(g, group, W)`` (the collective's transpose)."""

    class Collective(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group, W):
            ctx.group, ctx.W = group, W
            return forward(x, group, W)

        @staticmethod
        def backward(ctx, g):
            return backward(g, ctx.group, ctx.W), None, None
    Collective.__doc__ = doc
    return Collective


def _heads(x, group, W):
    return to_heads([x], group, W)[0]


def _sequence(x, group, W):
    return to_sequence([x], group, W)[0]


_AllGather = _differentiable(driver.all_gather_rows, driver.reduce_scatter_rows,
                             "``all_gather`` along dim 0 (rank order); its backward the "
                             "reduce-scatter.")
_ReduceScatter = _differentiable(driver.reduce_scatter_rows, driver.all_gather_rows,
                                 "Sum ``reduce_scatter`` along dim 0; its backward the all-gather.")
_ToHeads = _differentiable(_heads, _sequence, "Ulysses' all-to-all ``[B, H, S/W, D]`` -> "
                           "``[B, H/W, S, D]``; its backward the inverse.")
_ToSequence = _differentiable(_sequence, _heads, "The inverse all-to-all ``[B, H/W, S, D]`` -> "
                              "``[B, H, S/W, D]``.")


def _apply(fn, x, par: Parallel):
    return x if par.world_size == 1 else fn.apply(x, par.group, par.world_size)


def heads_of(x, par: Parallel):
    """This rank's heads of the whole sequence from every rank's sequence block of all heads
    (``[B, H, S/W, D]`` -> ``[B, H/W, S, D]``, an all-to-all; differentiable)."""
    return _apply(_ToHeads, x, par)


def sequence_of(x, par: Parallel):
    """The inverse of :func:`heads_of` (``[B, H/W, S, D]`` -> ``[B, H, S/W, D]``)."""
    return _apply(_ToSequence, x, par)


def all_gather_seq(x, par: Parallel):
    """Every rank's ``x`` concatenated along dim 0 in rank order (differentiable)."""
    return _apply(_AllGather, x, par)


def reduce_scatter_seq(x, par: Parallel):
    """This rank's rows of the sum over ranks of ``x`` along dim 0 (differentiable)."""
    if x.shape[0] % par.world_size:
        raise UsageError(f"reduce_scatter_seq: {x.shape[0]} rows do not divide over "
                         f"{par.world_size} ranks")
    return _apply(_ReduceScatter, x, par)


__all__ = ["Parallel", "REPLICATED", "all_gather_seq", "heads_of", "mark_replicated",
           "reduce_scatter_seq", "sequence_of", "sync_grads"]
