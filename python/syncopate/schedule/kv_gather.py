"""The K/V plan of ring attention: K and V gathered together along the sequence.

Why a template of its own: ring attention's kernel reads a KV block of K and the same block of
V in one loop iteration, so the two tensors must arrive block by block *together*: the chunk of
V's block from owner ``o`` has the same step as K's (they are concurrent), and chunk ids run K's
chunks first, then V's, in the all-gather's (round, rank, piece) order.  Both tensors are
sharded along ``dim`` (the sequence) in the same way, so the inner-loop remap's visiting order
(local blocks first, then in arrival order) fits both.

``order='swizzle'`` fetches every block from its owner (all-gather order); ``order='ring'``
passes blocks around the ring ``r -> r + 1``, one hop per round (the ring-attention pattern:
only neighbour links, each hop forwarding what arrived at the previous round).
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ScheduleError
from .generators import (ORDERS, _Builder, _gather, _meta, _pieces, _reduce_scatter, _validate,
                         gathered, scattered, shard_regions, sharded_schedule)
from .model import Schedule


def kv_all_gather(shape: Sequence[int], dtype: str, world_size: int, dim: int = 0,
                  order: str = "swizzle", mode: str = "pull", split: int = 1,
                  tensors: Sequence[str] = ("K", "V"), tensor: str | None = None) -> Schedule:
    """All-gather of two (or more) tensors of one ``shape`` along ``dim``, block by block
    together.  ``tensor`` (the CLI's ``--tensor``) is refused: name them with ``tensors``."""
    if tensor is not None:
        raise ScheduleError("kv_all_gather gathers several tensors: name them with "
                            "tensors=('K', 'V'), not tensor=")
    names = tuple(tensors)
    if len(names) < 1 or len(set(names)) != len(names):
        raise ScheduleError(f"kv_all_gather: tensors={list(names)} must be distinct names")
    return sharded_schedule("kv_all_gather", shape, dtype, world_size, dim, order, mode, split,
                            names, dict(order=order, mode=mode, split=split, tensors=list(names)))


def kv_backward(shape: Sequence[int], dtype: str, grad_dtype: str, world_size: int, dim: int = 0,
                order: str = "swizzle", kv: Sequence[str] = ("K", "V"),
                grads: Sequence[str] = ("DK", "DV")) -> Schedule:
    """The context-parallel attention backward's plan: K and V all-gathered along ``dim`` (the
    sequence) block by block together, as :func:`kv_all_gather` (pull), and the partial
    gradients ``grads`` -- every rank's dK/dV for the *whole* gathered sequence, from its own
    queries -- reduce-scattered to the owners of the blocks (push, in ``grad_dtype``: fp32
    partials keep the sum's rounding off the bf16 grid).

    The reduce-scatter's steps follow every gather step: a comm program first delivers the
    blocks its rank's tiles wait for, then sends partials.  Interleaving them could deadlock
    (a program waiting for a peer's partial whose tiles wait for a block this program has not
    fetched yet)."""
    names = tuple(kv) + tuple(grads)
    if len(set(names)) != len(names) or not kv or not grads:
        raise ScheduleError(f"kv_backward: kv={list(kv)} and grads={list(grads)} must be "
                            f"non-empty and distinct names")
    for t, dt in [(t, dtype) for t in kv] + [(t, grad_dtype) for t in grads]:
        shape, _, dims = _validate("kv_backward", shape, dt, world_size, {"dim": dim}, order,
                                   ORDERS, "pull", 1, t)
    dim = dims["dim"]
    W = world_size
    shards = shard_regions(shape, dim, W)
    pieces = _pieces(shards, dim, 1)
    b = _Builder()
    for t in kv:
        _gather(b, t, pieces, W, order, "pull", 1)
    for t in grads:
        _reduce_scatter(b, t, pieces, W, order, "push", 1, step0=W - 1)
    specs = {t: gathered(t, shape, dtype, shards, W) for t in kv}
    specs.update({t: scattered(t, shape, grad_dtype, shards, W) for t in grads})
    return Schedule(W, specs, b.chunks,
                    _meta("kv_backward", shape=shape, dtype=dtype, grad_dtype=grad_dtype,
                          world_size=W, dim=dim, order=order, kv=list(kv), grads=list(grads)))


__all__ = ["kv_all_gather", "kv_backward"]
